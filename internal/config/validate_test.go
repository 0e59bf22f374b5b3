package config

import (
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Validation goes on past the first mistake: in one section, across
// sections and upstreams, and inside a credential.
func TestValidateCollects(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0"})
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{name: "sections", yaml: base + "store: {driver: postgres}\napproval: {timeout: 48h, webhook: {url: ftp://x}}\nlog_level: loud\n", want: []string{
			"store.dsn: is required with driver postgres",
			"approval.timeout: must be between 1s and 24h",
			"approval.webhook.url: must be an absolute http(s) URL",
			"approval.webhook.secret: is required (at least 16 characters) to sign deliveries",
			"log_level: must be debug, info, warn or error",
		}},
		{name: "upstreams", yaml: "admin_token: ${ADMIN}\nupstreams:\n  - name: A\n    base_url: https://a.example\n    timeout: -1s\n    credential: {source: file}\n" +
			"  - name: b\n    base_url: https://b.example\n    credential: {source: vault}\n", want: []string{
			"upstreams[0].name: must be 1-63 of a-z, 0-9, '-', '_'",
			"upstreams[0].timeout: must be positive",
			"upstreams[0].credential.path: is required for source file",
			"upstreams[1].credential.source: vault needs a top-level vault: section",
			"upstreams[1].credential.path: is required for source vault (the KV v2 path, e.g. secret/data/github)",
			"upstreams[1].credential.field: is required for source vault (the field holding the secret)",
		}},
		{name: "oauth2", yaml: oauthHead + "    credential: {source: oauth2, token_url: 'ftp://x', grant_type: refresh_token, refresh_token: {source: env}}\n", want: []string{
			"upstreams[0].credential.token_url: must be an absolute http(s) URL without fragment or user info",
			"upstreams[0].credential.client_id: is required",
			"upstreams[0].credential.refresh_token.name: is required for source env",
		}},
		{name: "aws", yaml: "admin_token: ${ADMIN}\nupstreams:\n  - name: s3\n    type: aws\n    service: S3\n    region: mars\n    credential: {source: aws, assume_role: {role_arn: role, max_duration: 1m}}\n", want: []string{
			"upstreams[0].service: is required (s3, dynamodb, sqs, ...)",
			"upstreams[0].region: is required (us-east-1, ...)",
			"upstreams[0].credential.assume_role.role_arn: must be an ARN",
			"upstreams[0].credential.assume_role.max_duration: must be between 15m and 12h",
		}},
		{name: "vault", yaml: base + "vault: {address: vault, auth: {method: approle}}\n", want: []string{
			"vault.address: must be an absolute http(s) URL",
			"vault.auth.role_id: is required for method approle",
			"vault.auth.secret_id: is required for method approle (or secret_id_file)",
		}},
		// format alone was silently replaced by "Bearer {secret}"
		{name: "format without a header", yaml: base + "    inject: {format: \"token {secret}\"}\n", want: []string{
			"upstreams[0].inject.format: applies to header injection only",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), getenv)
			if diff := cmp.Diff(tt.want, mistakes(t, err)); diff != "" {
				t.Errorf("mistakes (-want +got):\n%s", diff)
			}
		})
	}
}

// A config built in Go (broker dev) validates like a parsed one, twice
// over (Validate is idempotent), and a source of the other kind of
// upstream is refused.
func TestValidateGoConfig(t *testing.T) {
	getenv := env(map[string]string{"T": "x"})
	c := &Config{AdminToken: "0123456789abcdef0", Upstreams: []Upstream{
		{Name: "demo", BaseURL: "http://127.0.0.1:1", Credential: Credential{Source: &EnvCredential{Name: "T"}}},
		{Name: "s3", Type: "aws", Service: "s3", Region: "us-east-1", Credential: Credential{Source: &AWSChainCredential{}}},
	}}
	for range 2 {
		if err := c.Validate(getenv); err != nil {
			t.Fatal(err)
		}
	}
	if c.Upstreams[1].BaseURL != "" || c.Upstreams[1].Endpoint != "https://s3.us-east-1.amazonaws.com" {
		t.Fatalf("aws upstream: %+v", c.Upstreams[1])
	}
	c.Upstreams = c.Upstreams[:1]
	ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || ups["demo"].Source.Describe() == "" {
		t.Fatalf("Build: %v", err)
	}
	c.Upstreams = append(c.Upstreams, Upstream{Name: "s4", Type: "aws", Service: "s3", Region: "us-east-1", Credential: Credential{Source: &EnvCredential{Name: "T"}}})
	if diff := cmp.Diff([]string{"upstreams[1].credential.source: env: the form of another type of upstream"}, mistakes(t, c.Validate(getenv))); diff != "" {
		t.Fatal(diff)
	}
}
