package config

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

const digestA = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// mcpConfig is a good configuration with an mcp upstream.
const mcpConfig = `admin_token: ${ADMIN}
approval: {mcp_wait: 20s}
upstreams:
  - name: github
    base_url: https://api.github.com
    credential: {source: env, name: GITHUB_TOKEN}
  - name: linear
    type: mcp
    base_url: https://mcp.linear.app/mcp
    sensitive: true
    timeout: 20s
    max_body: 262144
    credential: {source: env, name: LINEAR_TOKEN}
    tools:
      create_issue: {digest: "` + digestA + `"}
      search.v2-beta: {digest: "` + digestA + `"}
`

var mcpEnv = env(map[string]string{"ADMIN": "0123456789abcdef0", "GITHUB_TOKEN": "gh", "LINEAR_TOKEN": "lin"})

func TestMCPUpstreamBuild(t *testing.T) {
	c, err := Parse([]byte(mcpConfig), mcpEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Approval.MCPWait == nil || *c.Approval.MCPWait != 20*time.Second {
		t.Errorf("mcp_wait = %v", c.Approval.MCPWait)
	}
	ups, _, err := c.Build(mcpEnv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	u := ups["linear"]
	if u.Kind != "mcp" || u.BaseURL.String() != "https://mcp.linear.app/mcp" || !u.Sensitive || u.Timeout != 20*time.Second || u.MaxBody != 262144 {
		t.Errorf("upstream = kind %s, base %s, sensitive %v, timeout %s, max_body %d", u.Kind, u.BaseURL, u.Sensitive, u.Timeout, u.MaxBody)
	}
	if diff := cmp.Diff(map[string]string{"create_issue": digestA, "search.v2-beta": digestA}, u.Tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if len(u.ForwardHeaders) != 0 {
		t.Errorf("an mcp upstream forwards sandbox headers by default: %v", u.ForwardHeaders)
	}
	if u.Inject.Header != "Authorization" || u.Inject.Format != "Bearer {secret}" {
		t.Errorf("inject = %+v, want the http default", u.Inject)
	}
	var hosts []string
	for _, h := range u.Hosts {
		hosts = append(hosts, h.String())
	}
	if diff := cmp.Diff([]string{"mcp.linear.app"}, hosts); diff != "" {
		t.Errorf("proxy door hosts (-want +got):\n%s", diff)
	}
	if ups["github"].Tools != nil || ups["github"].Kind != "http" {
		t.Errorf("the http upstream: kind %s, tools %v", ups["github"].Kind, ups["github"].Tools)
	}
	// The grants of a session accept the kind.
	kind := func(name string) (string, bool) { u, ok := ups[name]; return u.Kind, ok }
	spec := grants.Spec{Upstream: "linear", Rules: []grants.Rule{{Tool: "create_issue"}}}
	if err := grants.Validate("grants[0]", &spec, kind, time.Hour); err != nil {
		t.Errorf("a tool grant on the mcp upstream: %v", err)
	}
}

func TestMCPWait(t *testing.T) {
	for _, tt := range []struct {
		yaml    string
		want    time.Duration
		wantErr string
	}{
		{"", DefaultMCPWait, ""},
		{"approval: {mcp_wait: 0s}\n", 0, ""},
		{"approval: {mcp_wait: 15m}\n", 15 * time.Minute, ""},
		{"approval: {mcp_wait: -1s}\n", 0, "approval.mcp_wait: must be between 0 (answer pending at once) and 15m"},
		{"approval: {mcp_wait: 16m}\n", 0, "approval.mcp_wait: must be between 0 (answer pending at once) and 15m"},
	} {
		c, err := Parse([]byte("admin_token: ${ADMIN}\n"+tt.yaml), mcpEnv)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%q: err = %v, want %s", tt.yaml, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		if *c.Approval.MCPWait != tt.want {
			t.Errorf("%q: mcp_wait = %s, want %s", tt.yaml, *c.Approval.MCPWait, tt.want)
		}
	}
}

// An mcp upstream with three mistakes gets three messages, each with its
// field path.
func TestMCPUpstreamThreeMistakes(t *testing.T) {
	y := `admin_token: ${ADMIN}
upstreams:
  - name: linear
    type: mcp
    base_url: mcp.linear.app/mcp
    credential: {source: env, name: LINEAR_TOKEN}
    tools:
      repos/create: {digest: "` + digestA + `"}
      create_issue: {digest: "sha256:ABC"}
`
	_, err := Parse([]byte(y), mcpEnv)
	want := []string{
		`upstreams[0].base_url: must be the server's Streamable HTTP endpoint: an absolute http(s) URL without query, fragment or user info`,
		`upstreams[0].tools.create_issue.digest: must be sha256: followed by 64 lowercase hex digits (the tool's digest as the broker records it)`,
		`upstreams[0].tools["repos/create"]: a tool name may hold only letters, digits, '_', '-' and '.'`,
	}
	if diff := cmp.Diff(want, mistakes(t, err)); diff != "" {
		t.Fatalf("mistakes (-want +got):\n%s", diff)
	}
}

func TestMCPUpstreamErrors(t *testing.T) {
	up := func(extra string) string {
		return "admin_token: ${ADMIN}\nupstreams:\n  - name: linear\n    type: mcp\n    base_url: https://mcp.linear.app/mcp\n" + extra
	}
	cred := "    credential: {source: env, name: LINEAR_TOKEN}\n"
	oauth := func(s string) string {
		return up("    credential:\n      source: oauth2\n      token_url: https://auth.example/token\n      client_id: c\n      client_secret: {source: env, name: S}\n" + s)
	}
	for _, tt := range []struct{ name, yaml, field string }{
		{"fail-tool name of 200 characters", up(cred + "    tools: {" + strings.Repeat("a", 200) + ": {digest: '" + digestA + "'}}\n"), "upstreams[0].tools." + strings.Repeat("a", 200)},
		{"fail-tool name with a space", up(cred + "    tools: {'a b': {digest: '" + digestA + "'}}\n"), `upstreams[0].tools["a b"]`},
		{"fail-digest upper-case hex", up(cred + "    tools: {t: {digest: '" + strings.ToUpper(digestA) + "'}}\n"), "upstreams[0].tools.t.digest"},
		{"fail-digest of another hash", up(cred + "    tools: {t: {digest: 'sha512:" + digestA[7:] + "'}}\n"), "upstreams[0].tools.t.digest"},
		{"fail-digest missing", up(cred + "    tools: {t: {}}\n"), "upstreams[0].tools.t.digest"},
		{"fail-unknown tool field", up(cred + "    tools: {t: {digest: '" + digestA + "', hash: x}}\n"), "upstreams[0].tools.t.hash"},
		{"fail-tools on an http upstream", "admin_token: ${ADMIN}\nupstreams:\n  - name: gh\n    base_url: https://api.github.com\n" + cred + "    tools: {t: {digest: '" + digestA + "'}}\n", "upstreams[0].tools"},
		{"fail-ftp base_url", strings.Replace(up(cred), "https://mcp.linear.app/mcp", "ftp://mcp.linear.app/mcp", 1), "upstreams[0].base_url"},
		{"fail-base_url with a query", strings.Replace(up(cred), "/mcp\n", "/mcp?key=x\n", 1), "upstreams[0].base_url"},
		{"fail-forward Mcp-Session-Id", up(cred + "    forward_headers: [Mcp-Session-Id]\n"), "upstreams[0].forward_headers[0]"},
		{"fail-forward Authorization", up(cred + "    forward_headers: [Authorization]\n"), "upstreams[0].forward_headers[0]"},
		{"fail-aws fields", up(cred + "    service: s3\n"), "upstreams[0]"},
		{"fail-allow_path_semicolons", up(cred + "    allow_path_semicolons: true\n"), "upstreams[0].allow_path_semicolons"},
		{"fail-inject format", up(cred + "    inject: {header: Authorization, format: Bearer}\n"), "upstreams[0].inject.format"},
		{"fail-aws credential", up("    credential: {source: aws}\n"), "upstreams[0].credential.source"},
		{"fail-oauth2 resource with a fragment", oauth("      resource: https://mcp.linear.app/mcp#x\n"), "upstreams[0].credential.resource"},
		{"fail-oauth2 relative resource", oauth("      resource: /mcp\n"), "upstreams[0].credential.resource"},
		{"fail-oauth2 scopes_for", oauth("      scopes_for: {'POST /mcp': [write]}\n"), "upstreams[0].credential.scopes_for"},
		{"fail-type", strings.Replace(up(cred), "type: mcp", "type: mpc", 1), "upstreams[0].type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(map[string]string{"ADMIN": "0123456789abcdef0", "S": "s"}))
			var fields []string
			for _, e := range Errors(err) {
				var fe *fault.FieldError
				if errors.As(e, &fe) {
					fields = append(fields, fe.Field)
				}
			}
			if len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("err = %v, want one mistake at %s", err, tt.field)
			}
		})
	}
}

// broker config check reads a file through Check: a good configuration
// with an mcp upstream passes.
func TestMCPConfigCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(path, []byte(mcpConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, mcpEnv); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

// An oauth2 source's resource is the RFC 8707 resource parameter of every
// token request, with both grant types.
func TestOAuth2Resource(t *testing.T) {
	var (
		mu    sync.Mutex
		forms []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		mu.Lock()
		forms = append(forms, r.PostForm.Get("grant_type")+" "+r.PostForm.Get("resource"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"at","token_type":"Bearer","expires_in":60}`)
	}))
	defer srv.Close()
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "S": "client-secret", "RT": "rt"})
	sc := upstream.Scope{Now: time.Now(), Expires: time.Now().Add(time.Hour), Rules: []grants.Rule{{Tool: "create_issue"}}}
	for _, grant := range []string{
		"client_secret: {source: env, name: S}",
		"grant_type: refresh_token, refresh_token: {source: env, name: RT}",
	} {
		y := "admin_token: ${ADMIN}\nupstreams:\n  - name: linear\n    type: mcp\n    base_url: https://mcp.linear.app/mcp\n" +
			"    credential: {source: oauth2, token_url: '" + srv.URL + "/token', client_id: c, resource: 'https://mcp.linear.app/mcp', " + grant + "}\n"
		c, err := Parse([]byte(y), getenv)
		if err != nil {
			t.Fatal(err)
		}
		ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ups["linear"].Minter.Mint(t.Context(), sc); err != nil {
			t.Fatalf("%s: %v", grant, err)
		}
	}
	want := []string{"client_credentials https://mcp.linear.app/mcp", "refresh_token https://mcp.linear.app/mcp"}
	if diff := cmp.Diff(want, forms); diff != "" {
		t.Errorf("token requests (-want +got):\n%s", diff)
	}
}
