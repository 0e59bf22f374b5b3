package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/fault"
)

// mistakes lists the joined error's messages, checking that each is a
// *fault.FieldError whose text starts with its field path.
func mistakes(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("not a joined error: %v", err)
	}
	var out []string
	for _, e := range j.Unwrap() {
		var fe *fault.FieldError
		if !errors.As(e, &fe) {
			t.Errorf("not a *fault.FieldError: %v", e)
			continue
		}
		if !strings.HasPrefix(e.Error(), fe.Field+": ") {
			t.Errorf("%q does not start with its field %s", e, fe.Field)
		}
		out = append(out, e.Error())
	}
	return out
}

// Three mistakes in three sections: all three reported at once, each
// naming its field.
func TestEveryMistakeAtOnce(t *testing.T) {
	y := `
admin_token: ${ADMIN}
sandbox_listn: 127.0.0.1:9000
max_session_ttl: forever
upstreams:
  - name: github
    credential: {source: env, name: GITHUB_TOKEN}
`
	_, err := Parse([]byte(y), env(map[string]string{"ADMIN": "0123456789abcdef0"}))
	want := []string{
		`sandbox_listn: unknown field (did you mean sandbox_listen?)`,
		`max_session_ttl: not a duration: "forever"`,
		`upstreams[0].base_url: must be an absolute http(s) URL without query, fragment or user info`,
	}
	if diff := cmp.Diff(want, mistakes(t, err)); diff != "" {
		t.Fatalf("mistakes (-want +got):\n%s", diff)
	}
	// Load and Check say the same of a file; Errors lists them.
	path := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	err = Check(path, env(map[string]string{"ADMIN": "0123456789abcdef0"}))
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Error())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Check (-want +got):\n%s", diff)
	}
	if err := Check(path, env(map[string]string{"ADMIN": "0123456789abcdef0"})); err == nil {
		t.Fatal("Check accepted it")
	}
}

// Each row is one mistake in an otherwise valid config; want is every
// message it gets, exactly.
func TestDecodeErrors(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "BIG": "CANARY-not-a-number"})
	second := "  - name: other\n    base_url: https://other.example\n    credential: {source: env, name: T}\n"
	tests := []struct {
		name string
		yaml string // after base
		want []string
	}{
		{name: "unknown nested key with its index", yaml: second + "    inject: {hedaer: X-Key}\n",
			want: []string{"upstreams[1].inject.hedaer: unknown field (did you mean header?)"}},
		{name: "unknown key of a source", yaml: "  - name: other\n    base_url: https://other.example\n    credential: {source: env, nmae: T}\n",
			want: []string{"upstreams[1].credential.nmae: unknown field for source env (did you mean name?)", "upstreams[1].credential.name: is required for source env"}},
		{name: "a key of another source", yaml: "  - name: s3\n    type: aws\n    service: s3\n    region: us-east-1\n    credential: {source: env, name: AK}\n",
			want: []string{"upstreams[1].credential.name: unknown field for source env of an aws upstream",
				"upstreams[1].credential.access_key_name: is required for source env (the variable holding the access key id)",
				"upstreams[1].credential.secret_key_name: is required for source env (the variable holding the secret key)"}},
		{name: "unknown key far from any", yaml: "approval: {webhook: {colour: blue}}\n",
			want: []string{"approval.webhook.colour: unknown field"}},
		{name: "duration", yaml: "approval: {proxy_wait: soon}\n",
			want: []string{`approval.proxy_wait: not a duration: "soon"`}},
		{name: "a bare number is not a duration", yaml: "ui: {session_ttl: 3600}\n",
			want: []string{`ui.session_ttl: not a duration: "3600"`}},
		{name: "int", yaml: second + "    max_body: big\n",
			want: []string{`upstreams[1].max_body: not a number: "big"`}},
		{name: "fraction for an int", yaml: "proxy_max_tunnels: 1.5\n",
			want: []string{`proxy_max_tunnels: not a whole number: "1.5"`}},
		{name: "negative for a count", yaml: "audit: {checkpoint_every: -3}\n",
			want: []string{`audit.checkpoint_every: must not be negative: "-3"`}},
		{name: "float", yaml: "rate_limit: {per_session: fast}\n",
			want: []string{`rate_limit.per_session: not a number: "fast"`}},
		{name: "bool", yaml: "enforce_isolation: maybe\n",
			want: []string{`enforce_isolation: not a boolean: "maybe"`}},
		{name: "list", yaml: "    forward_headers: X-Trace\n",
			want: []string{`upstreams[0].forward_headers: must be a list, not "X-Trace"`}},
		{name: "list element", yaml: "    forward_headers: [X-Trace, {X-Other: 1}]\n",
			want: []string{`upstreams[0].forward_headers[1]: must be a string, not a mapping`}},
		{name: "section", yaml: "audit: fsync\n",
			want: []string{`audit: must be a mapping (key: value), not "fsync"`}},
		{name: "upstreams", yaml: "store: [bbolt]\n",
			want: []string{`store: must be a mapping (key: value), not a list`}},
		{name: "credential", yaml: "  - name: other\n    base_url: https://other.example\n    credential: GITHUB_TOKEN\n",
			want: []string{`upstreams[1].credential: must be a mapping (source: ..., and its keys), not "GITHUB_TOKEN"`}},
		{name: "key set twice in a credential", yaml: second + "    credential: {source: file, path: /k}\n",
			want: []string{"upstreams[1].credential: is set twice"}},
		{name: "unknown source", yaml: "  - name: other\n    base_url: https://other.example\n    credential: {source: ldap, name: T}\n",
			want: []string{"upstreams[1].credential.source: must be env, file, vault, github_app or oauth2"}},
		{name: "map value", yaml: "  - name: gh\n    base_url: https://gh.example\n    credential: {source: github_app, app_id: '1', installation_id: '2', private_key_file: /k, permissions: {contents: [read]}}\n",
			want: []string{"upstreams[1].credential.permissions.contents: must be a string, not a list"}},
		{name: "key set twice", yaml: "log_level: info\nlog_level: debug\n",
			want: []string{"log_level: is set twice"}},
		{name: "an expanded value is not echoed", yaml: second + "    max_body: ${BIG}\n",
			want: []string{`upstreams[1].max_body: not a number: "${BIG}"`}},
		{name: "every unset variable", yaml: "store: {driver: postgres, dsn: \"${USER_X}:${PASS_X}\"}\n",
			want: []string{"store.dsn: environment variable USER_X is not set", "store.dsn: environment variable PASS_X is not set"}},
	}
	goType := regexp.MustCompile(`time\.Duration|int64|float64|uint64|\bbool\b|config\.|\[\]string|map\[|!!|unmarshal`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tt.yaml), getenv)
			got := mistakes(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("mistakes (-want +got):\n%s", diff)
			}
			for _, m := range got {
				if goType.MatchString(m) || strings.Contains(m, "CANARY") {
					t.Errorf("%q names a Go type or echoes a secret", m)
				}
			}
		})
	}
}

// Anchors and merge keys decode as YAML defines them; a merged key does
// not count as set twice.
func TestDecodeAnchors(t *testing.T) {
	y := `
admin_token: ${ADMIN}
x-common: &common
  credential: {source: env, name: T}
  timeout: 5s
upstreams:
  - <<: *common
    name: a
    base_url: https://a.example
  - <<: *common
    name: b
    base_url: https://b.example
    timeout: 7s
`
	_, err := Parse([]byte(y), env(map[string]string{"ADMIN": "0123456789abcdef0"}))
	if diff := cmp.Diff([]string{"x-common: unknown field"}, mistakes(t, err)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	y = strings.Replace(y, "x-common: &common\n  credential: {source: env, name: T}\n  timeout: 5s\nupstreams:\n",
		"upstreams:\n  - &common\n    name: c\n    base_url: https://c.example\n    credential: {source: env, name: T}\n    timeout: 5s\n", 1)
	c, err := Parse([]byte(y), env(map[string]string{"ADMIN": "0123456789abcdef0"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range c.Upstreams {
		got = append(got, u.Name+" "+u.Timeout.String()+" "+u.Credential.Source.(*EnvCredential).Name)
	}
	if diff := cmp.Diff([]string{"c 5s T", "a 5s T", "b 7s T"}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// A config that is not a mapping, or not YAML, is one error.
func TestParseNotAMapping(t *testing.T) {
	for _, y := range []string{"- a\n- b\n", "just words\n", "a: [\n"} {
		if _, err := Parse([]byte(y), env(nil)); err == nil || len(Errors(err)) != 1 {
			t.Errorf("%q: %v", y, err)
		}
	}
}

// An anchor that holds itself, or a merge of something else than
// mappings, is an error, not a hang.
func TestDecodeBadAliases(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"alias in itself", "upstreams: &u\n  - name: a\n    forward_headers: *u\n", "upstreams[0].forward_headers[0]: must be a string, not a mapping"},
		{"merge of itself", "audit: &a\n  <<: *a\n", "audit.<<: merges mappings only (<<: *anchor or <<: [*a, *b]), at most 16 deep"},
		{"merge of a value", "audit:\n  <<: 3\n", "audit.<<: merges mappings only (<<: *anchor or <<: [*a, *b]), at most 16 deep"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("admin_token: 0123456789abcdef0\n"+tt.yaml), env(nil))
			if got := mistakes(t, err); !slices.Contains(got, tt.want) {
				t.Fatalf("got %q, want %q among them", got, tt.want)
			}
		})
	}
}
