package config

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/airlock-broker/airlock/internal/upstream"
	vaultcred "github.com/airlock-broker/airlock/internal/upstream/vault"
)

// builder is what a credential source's build needs.
type builder struct {
	ctx    context.Context
	getenv func(string) string
	vault  *vaultcred.Client // nil without a vault: section
	tls    *tls.Config       // the upstream's ca_cert, trusted alone (nil: the system roots)
	region string            // an aws upstream's
}

// built is what a credential source makes for its upstream.
type built struct {
	source   upstream.Source
	minter   upstream.Minter                 // per-session credentials, or nil
	awsCreds upstream.AWSCredentialsProvider // an aws upstream's shared key pair, or nil when minted
}

// Build makes the runtime upstreams, resolving credential sources, and the
// Vault client they share (nil when none uses Vault; Close it when done).
// Its error joins every upstream's.
func (c *Config) Build(getenv func(string) string, log *slog.Logger) (map[string]*upstream.Upstream, *vaultcred.Client, error) {
	b := builder{ctx: context.Background(), getenv: getenv}
	if c.Vault != nil {
		v, err := c.Vault.build(log.With("component", "vault"))
		if err != nil {
			return nil, nil, fieldErr("vault", "%v", err)
		}
		b.vault = v
	}
	out := make(map[string]*upstream.Upstream, len(c.Upstreams))
	var e errs
	for i := range c.Upstreams {
		up, err := c.Upstreams[i].build(fmt.Sprintf("upstreams[%d]", i), b)
		if err != nil {
			e.join(err)
			continue
		}
		out[up.Name] = up
	}
	if err := e.err(); err != nil {
		if b.vault != nil {
			b.vault.Close()
		}
		return nil, nil, err
	}
	return out, b.vault, nil
}

// build makes the runtime upstream of a validated u, at path f.
func (u *Upstream) build(f string, b builder) (*upstream.Upstream, error) {
	if u.CACert != "" {
		pool, err := caPool(u.CACert)
		if err != nil {
			return nil, fieldErr(f+".ca_cert", "%v", err)
		}
		b.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if u.Credential.Source == nil {
		return nil, fieldErr(f+".credential.source", "is required")
	}
	b.region = u.Region
	got, err := u.Credential.Source.build(f+".credential", &b)
	if err != nil {
		return nil, err
	}
	base := u.BaseURL
	var awsCfg *upstream.AWS
	if u.Type == "aws" {
		base = u.Endpoint
		awsCfg = &upstream.AWS{Service: u.Service, Region: u.Region, AllowDotKeys: u.AllowDotKeys, Creds: got.awsCreds}
	}
	bu, err := url.Parse(base)
	if err != nil {
		return nil, fieldErr(f+".base_url", "must be an absolute http(s) URL")
	}
	fwd := map[string]bool{}
	defaults := upstream.DefaultForwardHeaders
	if u.Type == "mcp" {
		defaults = nil // the MCP door builds the request's headers
	}
	for _, h := range append(append([]string{}, defaults...), u.ForwardHeaders...) {
		fwd[http.CanonicalHeaderKey(h)] = true
	}
	up := &upstream.Upstream{
		Name: u.Name, Kind: u.Type, BaseURL: bu, Sensitive: u.Sensitive == nil || *u.Sensitive,
		Timeout: u.Timeout, MaxBody: u.MaxBody, ForwardHeaders: fwd, Source: got.source, Minter: got.minter,
		Inject:         upstream.Injection{Header: u.Inject.Header, Format: u.Inject.Format, Query: u.Inject.Query, BasicUser: u.Inject.BasicUser, HMAC: hmacSigning(u.Inject.HMAC)},
		AWS:            awsCfg,
		RotationGrace:  u.Scrub.RotationGrace,
		Placeholder:    u.placeholder,
		Hosts:          u.proxyHosts,
		PropagateTrace: u.PropagateTrace,
		Tools:          u.pinnedTools(),

		AllowPathSemicolons: u.AllowPathSemicolons,
	}
	tr := upstream.NewTransport()
	if b.tls != nil {
		tr.TLSClientConfig = b.tls
	}
	up.SetTransport(tr)
	return up, nil
}

// hmacSigning is the runtime form of h (nil: none).
func hmacSigning(h *InjectHMAC) *upstream.HMACSigning {
	if h == nil {
		return nil
	}
	s := upstream.HMACSigning(*h)
	return &s
}
