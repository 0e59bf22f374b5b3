package config

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
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
	if ups["github"].AllowPathSemicolons {
		t.Error("allow_path_semicolons must default to false")
	}
	c, err = Parse([]byte(base+"    allow_path_semicolons: true\n"), env(map[string]string{"ADMIN": "0123456789abcdef0"}))
	if err != nil {
		t.Fatal(err)
	}
	if ups, _, err := c.Build(env(map[string]string{"GITHUB_TOKEN": "x"}), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil || !ups["github"].AllowPathSemicolons {
		t.Fatalf("allow_path_semicolons: true does not reach the upstream: %v", err)
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
		{name: "sandbox traceparent forwarded", yaml: base + "    forward_headers: [Accept, traceparent]\n", env: admin, field: "upstreams[0].forward_headers[1]"},
		{name: "sandbox tracestate forwarded", yaml: base + "    forward_headers: [Tracestate]\n", env: admin, field: "upstreams[0].forward_headers[0]"},
		{name: "sandbox baggage forwarded", yaml: base + "    forward_headers: [baggage]\n", env: admin, field: "upstreams[0].forward_headers[0]"},
		{name: "two injections", yaml: base + "    inject: {header: X-Key, query: key}\n", env: admin, field: "upstreams[0].inject"},
		{name: "format without secret", yaml: base + "    inject: {header: X-Key, format: static}\n", env: admin, field: "upstreams[0].inject.format"},
		{name: "no credential", yaml: strings.Replace(base, "    credential: {source: env, name: GITHUB_TOKEN}\n", "", 1), env: admin, field: "upstreams[0].credential.source"},
		{name: "allow_dot_keys on an http upstream", yaml: base + "    allow_dot_keys: true\n", env: admin, field: "upstreams[0].allow_dot_keys"},
		{name: "aws needs a service", yaml: "admin_token: ${ADMIN}\nupstreams:\n  - name: s3\n    type: aws\n    region: us-east-1\n    credential: {source: aws}\n", env: admin, field: "upstreams[0].service"},
		{name: "path semicolons on aws", yaml: "admin_token: ${ADMIN}\nupstreams:\n  - name: s3\n    type: aws\n    service: s3\n    region: us-east-1\n    allow_path_semicolons: true\n    credential: {source: aws}\n", env: admin, field: "upstreams[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(tt.env))
			if err == nil {
				t.Fatal("no error")
			}
			var fe *fault.FieldError
			if tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field) {
				t.Fatalf("err = %v, want field %s", err, tt.field)
			}
			if tt.text != "" && !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want it to mention %s", err, tt.text)
			}
		})
	}
}

func TestScrubRotationGrace(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "a-long-admin-token-123", "GITHUB_TOKEN": "x"})
	build := func(yaml string) (map[string]time.Duration, error) {
		c, err := Parse([]byte(yaml), getenv)
		if err != nil {
			return nil, err
		}
		ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return nil, err
		}
		out := map[string]time.Duration{}
		for n, u := range ups {
			out[n] = u.RotationGrace
		}
		return out, nil
	}
	got, err := build(base)
	if err != nil || got["github"] != 24*time.Hour {
		t.Fatalf("default: %v, %v", got, err)
	}
	got, err = build(base + "    scrub: {rotation_grace: 1h}\n  - name: other\n    base_url: https://x.example\n    credential: {source: env, name: GITHUB_TOKEN}\nscrub: {rotation_grace: 2h}\n")
	if err != nil || got["github"] != time.Hour || got["other"] != 2*time.Hour {
		t.Fatalf("per upstream and global: %v, %v", got, err)
	}
	for _, y := range []string{base + "scrub: {rotation_grace: -1h}\n", base + "    scrub: {rotation_grace: -1s}\n"} {
		var fe *fault.FieldError
		if _, err := build(y); !errors.As(err, &fe) || !strings.Contains(fe.Field, "scrub.rotation_grace") {
			t.Errorf("negative grace: %v", err)
		}
	}
}

// max_streams_per_session: 16 by default, validated like proxy_max_tunnels.
func TestConfigMaxStreams(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "a-long-admin-token-123", "GITHUB_TOKEN": "x"})
	for _, tc := range []struct {
		name, yaml string
		want       int
		err        bool
	}{
		{name: "default", yaml: "", want: DefaultMaxStreams},
		{name: "set", yaml: "max_streams_per_session: 2\n", want: 2},
		{name: "negative", yaml: "max_streams_per_session: -1\n", err: true},
		{name: "too many", yaml: "max_streams_per_session: 65537\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(base+tc.yaml), getenv)
			if tc.err {
				var fe *fault.FieldError
				if !errors.As(err, &fe) || fe.Field != "max_streams_per_session" {
					t.Fatalf("got %v, want an error naming max_streams_per_session", err)
				}
				return
			}
			if err != nil || c.MaxStreams != tc.want {
				t.Fatalf("got %v (%v), want %d", c.MaxStreams, err, tc.want)
			}
		})
	}
}
