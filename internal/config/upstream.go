package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	serviceRE = regexp.MustCompile(`^[a-z0-9-]+$`)
	regionRE  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
)

// validateUpstreams checks each upstream, then what upstreams must not
// share: names, placeholder variables, proxy hosts.
func (c *Config) validateUpstreams() error {
	var e errs
	seen := map[string]bool{}
	placeholders := map[string]string{} // env name → upstream
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		f := fmt.Sprintf("upstreams[%d]", i)
		e.join(u.validate(f, c.Vault != nil))
		if seen[u.Name] && nameRE.MatchString(u.Name) {
			e.add(f+".name", "duplicate upstream name %q", u.Name)
		}
		seen[u.Name] = true
		e.join(u.uniquePlaceholder(i, placeholders))
	}
	e.join(c.validateHosts())
	return e.err()
}

// validate checks one upstream at path f.
func (u *Upstream) validate(f string, hasVault bool) error {
	var e errs
	if !nameRE.MatchString(u.Name) {
		e.add(f+".name", "must be 1-63 of a-z, 0-9, '-', '_'")
	}
	if u.Timeout < 0 {
		e.add(f+".timeout", "must be positive")
	}
	if u.MaxBody < 0 {
		e.add(f+".max_body", "must be positive")
	}
	e.join(u.Scrub.validate(f + ".scrub"))
	if u.CACert != "" {
		if _, err := caPool(u.CACert); err != nil {
			e.add(f+".ca_cert", "%v", err)
		}
	}
	e.join(u.validatePlaceholder(f))
	if u.Type != "mcp" && len(u.Tools) > 0 {
		e.add(f+".tools", "applies to mcp upstreams only")
	}
	switch u.Type {
	case "http":
		e.join(u.validateHTTP(f))
	case "aws":
		e.join(u.validateAWS(f))
	case "mcp":
		e.join(u.validateMCP(f))
	default:
		e.add(f+".type", "must be http, aws or mcp")
		return e.err()
	}
	e.join(u.Credential.validateIn(f+".credential", sourcesFor(u.Type), hasVault))
	return e.err()
}

// validateHTTP checks the fields of an http upstream.
func (u *Upstream) validateHTTP(f string) error {
	var e errs
	if u.AllowDotKeys {
		e.add(f+".allow_dot_keys", "applies to aws upstreams only")
	}
	if !httpURL(u.BaseURL, false) {
		e.add(f+".base_url", "must be an absolute http(s) URL without query, fragment or user info")
	}
	for j, h := range u.ForwardHeaders {
		if grants.ForbiddenHeader(h) || strings.EqualFold(h, "Accept-Encoding") {
			e.add(fmt.Sprintf("%s.forward_headers[%d]", f, j), "%s may never be forwarded from a sandbox", h)
		}
	}
	e.join(u.Inject.validate(f + ".inject"))
	return e.err()
}

// validate checks an http upstream's injection (exactly one way), and
// completes an hmac signing's defaults (upstream.HMACSigning's own).
func (in *Inject) validate(f string) error {
	n := 0
	for _, set := range []bool{in.Header != "", in.Query != "", in.BasicUser != "", in.HMAC != nil} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return fieldErr(f, "set exactly one of header, query, basic_user, hmac")
	case in.HMAC != nil:
		if in.Format != "" {
			return fieldErr(f+".format", "applies to header injection only (hmac has its own format)")
		}
		h := upstream.HMACSigning(*in.HMAC)
		if err := h.Validate(); err != nil {
			return fieldErr(f+".hmac", "%v", err)
		}
		*in.HMAC = InjectHMAC(h)
	case in.Header != "":
		var e errs
		if !strings.Contains(in.Format, "{secret}") {
			e.add(f+".format", "must contain {secret}")
		}
		if strings.ContainsAny(in.Header, " :\r\n") {
			e.add(f+".header", "is not a valid header name")
		}
		return e.err()
	case in.Format != "":
		return fieldErr(f+".format", "applies to header injection only")
	}
	return nil
}

// validateAWS checks the fields of an aws upstream.
func (u *Upstream) validateAWS(f string) error {
	var e errs
	if !serviceRE.MatchString(u.Service) {
		e.add(f+".service", "is required (s3, dynamodb, sqs, ...)")
	}
	if !regionRE.MatchString(u.Region) {
		e.add(f+".region", "is required (us-east-1, ...)")
	}
	if u.Endpoint != "" && !httpURL(u.Endpoint, false) {
		e.add(f+".endpoint", "must be an absolute http(s) URL")
	}
	if u.BaseURL != "" || u.Inject != (Inject{}) || len(u.ForwardHeaders) > 0 || u.AllowPathSemicolons {
		e.add(f, "aws upstreams take service, region and endpoint; requests are SigV4-signed, not injected")
	}
	return e.err()
}
