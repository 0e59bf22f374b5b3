package config

import (
	"errors"
	"io"
	"log/slog"
	"regexp"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
)

func TestPlaceholderConfig(t *testing.T) {
	admin := env(map[string]string{"ADMIN": "0123456789abcdef0", "GITHUB_TOKEN": "x"})
	c, err := Parse([]byte(base+`    placeholder: {env: GITHUB_TOKEN, format: "ghp_{random:36}"}
`), admin)
	if err != nil {
		t.Fatal(err)
	}
	ups, _, err := c.Build(admin, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p := ups["github"].Placeholder
	if p == nil || p.Env != "GITHUB_TOKEN" {
		t.Fatalf("placeholder not built: %+v", p)
	}
	if v, _ := p.Mint(); !regexp.MustCompile(`^ghp_[A-Za-z0-9]{36}$`).MatchString(v) {
		t.Errorf("minted %q", v)
	}

	for _, tc := range []struct{ name, yaml, field string }{
		{"bad format", `    placeholder: {env: GITHUB_TOKEN, format: "ghp_{random}"}
`, "upstreams[0].placeholder"},
		{"reserved env", `    placeholder: {env: SSL_CERT_FILE, format: "x{random:8}"}
`, "upstreams[0].placeholder"},
		{"bad env", `    placeholder: {env: "A B", format: "x{random:8}"}
`, "upstreams[0].placeholder"},
		{"unknown key", `    placeholder: {env: T, format: "x", size: 3}
`, ""},
		{"claimed twice", `    placeholder: {env: TOKEN, format: "a{random:8}"}
  - name: other
    base_url: https://api.other.test
    credential: {source: env, name: GITHUB_TOKEN}
    placeholder: {env: TOKEN, format: "b{random:8}"}
`, "upstreams[1].placeholder.env"},
		{"aws upstream", ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := base + tc.yaml
			if tc.name == "aws upstream" {
				y = base + `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: http://127.0.0.1:9000
    credential: {source: env, access_key_name: AK, secret_key_name: SK}
    placeholder: {env: AWS_TOKEN, format: "x{random:8}"}
`
				tc.field = "upstreams[1].placeholder"
			}
			_, err := Parse([]byte(y), admin)
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *fault.FieldError
			if tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
				t.Errorf("error %v, want field %s", err, tc.field)
			}
		})
	}
}
