package config

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

const base = `
admin_token: ${ADMIN}
upstreams:
  - name: github
    base_url: https://api.github.com
    credential: {source: env, name: GITHUB_TOKEN}
`

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseDefaultsAndExpansion(t *testing.T) {
	c, err := Parse([]byte(base), env(map[string]string{"ADMIN": "a-long-admin-token: with: colons\n- and: yaml"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.AdminToken != "a-long-admin-token: with: colons\n- and: yaml" {
		t.Errorf("an expanded value must stay a plain string, got %q", c.AdminToken)
	}
	if c.SandboxListen != DefaultSandboxListen || c.ControlListen != DefaultControlListen || c.MaxSessionTTL != time.Hour ||
		!*c.EnforceIsolation || c.Audit.Durability != "fsync" {
		t.Errorf("defaults: %+v", c)
	}
	u := c.Upstreams[0]
	if !*u.Sensitive || u.Timeout != DefaultTimeout || u.MaxBody != DefaultMaxBody || u.Inject.Header != "Authorization" || u.Inject.Format != "Bearer {secret}" {
		t.Errorf("upstream defaults: %+v", u)
	}
	ups, _, err := c.Build(env(map[string]string{"GITHUB_TOKEN": "x"}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || ups["github"] == nil {
		t.Fatalf("Build: %v", err)
	}
	if _, _, err := c.Build(env(nil), slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "GITHUB_TOKEN") {
		t.Fatalf("Build without the env credential: %v", err)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	admin := map[string]string{"ADMIN": "0123456789abcdef0"}
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		field string
		text  string
	}{
		{name: "missing env var", yaml: base, env: map[string]string{}, field: "admin_token", text: "ADMIN"},
		{name: "short admin token", yaml: base, env: map[string]string{"ADMIN": "short"}, field: "admin_token"},
		{name: "unknown field", yaml: base + "colour: blue\n", env: admin, text: "colour"},
		{name: "bad durability", yaml: base + "audit: {durability: sometimes}\n", env: admin, field: "audit.durability"},
		{name: "same listeners", yaml: base + "sandbox_listen: 127.0.0.1:9000\ncontrol_listen: 127.0.0.1:9000\n", env: admin, field: "control_listen"},
		{name: "bad base_url", yaml: strings.Replace(base, "https://api.github.com", "ftp://x", 1), env: admin, field: "upstreams[0].base_url"},
		{name: "base_url with query", yaml: strings.Replace(base, "https://api.github.com", "https://x/?a=1", 1), env: admin, field: "upstreams[0].base_url"},
		{name: "bad name", yaml: strings.Replace(base, "name: github", "name: Git Hub", 1), env: admin, field: "upstreams[0].name"},
		{name: "forbidden forward header", yaml: base + "    forward_headers: [Cookie]\n", env: admin, field: "upstreams[0].forward_headers[0]"},
		{name: "two injections", yaml: base + "    inject: {header: X-Key, query: key}\n", env: admin, field: "upstreams[0].inject"},
		{name: "format without secret", yaml: base + "    inject: {header: X-Key, format: static}\n", env: admin, field: "upstreams[0].inject.format"},
		{name: "no credential", yaml: strings.Replace(base, "    credential: {source: env, name: GITHUB_TOKEN}\n", "", 1), env: admin, field: "upstreams[0].credential.source"},
		{name: "allow_dot_keys on an http upstream", yaml: base + "    allow_dot_keys: true\n", env: admin, field: "upstreams[0].allow_dot_keys"},
		{name: "aws needs a service", yaml: strings.Replace(base, "name: github", "name: s3\n    type: aws", 1), env: admin, field: "upstreams[0].service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(tt.env))
			if err == nil {
				t.Fatal("no error")
			}
			var fe *FieldError
			if tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field) {
				t.Fatalf("err = %v, want field %s", err, tt.field)
			}
			if tt.text != "" && !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want it to mention %s", err, tt.text)
			}
		})
	}
}
