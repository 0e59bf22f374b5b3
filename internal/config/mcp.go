package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/airlock-broker/airlock/internal/grants"
)

// digestRE is a tool digest's form: sha256: and 64 lowercase hex digits.
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// validateMCP checks the fields of an mcp upstream: its endpoint, the
// injection (as an http upstream's), extra forwarded headers and pinned
// tools.
func (u *Upstream) validateMCP(f string) error {
	var e errs
	if !httpURL(u.BaseURL, false) {
		e.add(f+".base_url", "must be the server's Streamable HTTP endpoint: an absolute http(s) URL without query, fragment or user info")
	}
	if u.AllowDotKeys {
		e.add(f+".allow_dot_keys", "applies to aws upstreams only")
	}
	if u.AllowPathSemicolons {
		e.add(f+".allow_path_semicolons", "applies to http upstreams only (an mcp upstream is called at base_url itself)")
	}
	if u.Service != "" || u.Region != "" || u.Endpoint != "" {
		e.add(f, "mcp upstreams take base_url; service, region and endpoint are for aws upstreams")
	}
	for j, h := range u.ForwardHeaders {
		field := fmt.Sprintf("%s.forward_headers[%d]", f, j)
		switch c := strings.ToLower(h); {
		case grants.ForbiddenHeader(h) || c == "accept-encoding":
			e.add(field, "%s may never be forwarded from a sandbox", truncateField(h))
		case strings.HasPrefix(c, "mcp-") || c == "last-event-id" || c == "accept" || c == "content-type":
			e.add(field, "%s is set by the MCP door, never forwarded from a sandbox", truncateField(h))
		}
	}
	e.join(u.Inject.validate(f + ".inject"))
	if oc, ok := u.Credential.Source.(*OAuth2Credential); ok && len(oc.ScopesFor) > 0 {
		e.add(f+".credential.scopes_for", "matches REST rules (METHOD /path); the rules of an mcp upstream's grants name tools: list scopes instead")
	}
	for _, name := range slices.Sorted(maps.Keys(u.Tools)) {
		tf := keyPath(f+".tools", name)
		if err := grants.ValidateToolName(name); err != nil {
			e.add(tf, "a tool name %v", err)
		}
		if !digestRE.MatchString(u.Tools[name].Digest) {
			e.add(tf+".digest", "must be sha256: followed by 64 lowercase hex digits (the tool's digest as the broker records it)")
		}
	}
	return e.err()
}

// pinnedTools is the runtime form of an mcp upstream's tools: name →
// digest (nil when none is pinned).
func (u *Upstream) pinnedTools() map[string]string {
	if len(u.Tools) == 0 {
		return nil
	}
	m := make(map[string]string, len(u.Tools))
	for name, t := range u.Tools {
		m[name] = t.Digest
	}
	return m
}
