package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Red team, third round: DESIGN §4's rules and the neighbours of issue 11's
// classes that the first two rounds did not try, through the real server.

// rt3Budget is a grant budgeting a body field and a query parameter on a
// rule that constrains nothing itself.
func rt3Budget() map[string]any {
	return map[string]any{"upstream": "api", "budget": map[string]any{"body.fee": 10, "query.units": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/pay"}}}
}

// TestRedTeam3BudgetNeedsJSONBody (class 1, budgets): a budget on a body
// field was counted only when the body was declared JSON. Sent as
// text/plain, with no Content-Type, as text/json or with a Content-Type the
// broker cannot parse, {"fee": 1000} passed uncounted, and an upstream that
// decodes the body whatever its type (Go's json.NewDecoder(r.Body), Flask's
// get_json(force=True)) spent 1000 of a budget of 10.
func TestRedTeam3BudgetNeedsJSONBody(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(rt3Budget()))
	body := `{"fee": 1000}`
	var attacks []rtAttack
	for _, ct := range []string{"text/plain", "text/json", "application/x-json", "application/octet-stream", ""} {
		var h []string
		if ct != "" {
			h = []string{"Content-Type", ct}
		}
		attacks = append(attacks, rtAttack{"type " + ct, "POST", "/v1/proxy/api/pay", h, body, 403, "constraint_violated", "type"})
	}
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay", header: rtJSON, body: `{"fee": 4}`},
		{method: "POST", path: "/v1/proxy/api/pay?units=3"},
	})
	b.do("POST", b.sandbox+"/v1/proxy/api/pay", s.Token, `{"fee": 7}`).wantProblem(t, 403, "budget_exceeded")
	// A grant that reads no body field still takes any body.
	free := b.session(trustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/send", "constraints": map[string]any{"query.to": map[string]any{"pin": "acme"}}}}}))
	rtAllowed(t, b, up, free.Token, []rtAttack{{method: "POST", path: "/v1/proxy/api/send", header: []string{"Content-Type", "text/plain"}, body: `to=mallory`}})
}

// TestRedTeam3QueryKeyReaders (class 1, query keys): servers read a query
// key under another name than its own. Express (qs), PHP and Rails read
// "to[]=x", "to[0]=x" and "to[k]=x" as the parameter "to" (an array or a
// map); PHP also reads "account.id", "account id" and "account[id" as
// "account_id". A constrained (or budgeted) parameter sent so was not seen
// by the broker: its pattern and budget were skipped and a pin was filled
// in beside it.
func TestRedTeam3QueryKeyReaders(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10},
		"rules": []any{
			map[string]any{"method": "GET", "path": "/mail", "constraints": map[string]any{
				"query.to":         map[string]any{"pattern": "[a-z]+@acme\\.com"},
				"query.account_id": map[string]any{"pin": "42"},
			}},
		}}))
	var attacks []rtAttack
	for _, q := range []string{"to%5B%5D=evil%40mallory.com", "to[]=evil%40mallory.com", "to[0]=evil%40mallory.com", "to[x]=evil%40mallory.com",
		"TO[]=evil%40mallory.com", "account.id=7", "account%20id=7", "account[id=7", "Account.Id=7", "account_id[]=7", "units[]=1000", "units[0]=1000", "%20account_id=7"} {
		attacks = append(attacks, rtAttack{q, "GET", "/v1/proxy/api/mail?" + q, nil, "", 403, "constraint_violated", "name"})
	}
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "GET", path: "/v1/proxy/api/mail?to=bob%40acme.com&page[size]=2&units=3"},
		{method: "GET", path: "/v1/proxy/api/mail?account_id=42&toto=x&account=1"},
	})
	if got := up.last(t).RawQuery; got != "account_id=42&toto=x&account=1" {
		t.Errorf("the upstream received ?%s", got)
	}
}

// TestRedTeam3InjectedQueryParamReaders (DESIGN §4, credential in the
// query): the sandbox's own "api_key" was dropped, but "API_KEY" (ASP.NET
// reads query keys case-insensitively and binds the first value),
// "api_key[]" (qs, PHP, Rails) and "api.key" / "api key" (PHP reads both as
// "api_key") passed, ahead of the broker's: the upstream could act under a
// key the sandbox chose (its own account, to receive the grant's data).
func TestRedTeam3InjectedQueryParamReaders(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	for _, q := range []string{"api_key=mine", "API_KEY=mine", "Api_Key=mine", "api_key%5B%5D=mine", "api_key[]=mine", "api_key[0]=mine", "api.key=mine", "api%20key=mine", "api[key=mine", "%20api_key=mine", "api_%E2%84%AAey=mine"} {
		t.Run(q, func(t *testing.T) {
			r := b.do("GET", b.sandbox+"/v1/proxy/open/echo?"+q+"&x=1", s.Token, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%d %s", r.status, r.body)
			}
			got := up.last(t).RawQuery
			if strings.Contains(got, "mine") || !strings.HasPrefix(got, "x=1&api_key=") {
				t.Errorf("the upstream received ?%s", strings.ReplaceAll(got, url.QueryEscape(canary), "<secret>"))
			}
		})
	}
}

// rt3Secret is a credential with the characters that quoting encoders
// escape: both quotes, a backslash, '=' (quoted-printable), a space, '<'.
const rt3Secret = `Qk3y"wi'th=quo\tes/ sl<ash`

// TestRedTeam3ScrubQuotingEncoders (class 4): an upstream echoing a
// credential that holds quotes writes it the way its encoder quotes text:
// CSV doubles '"', YAML single-quoted and SQL strings double "'", Python's
// repr and JavaScript write \', a shell quotes it '\”, PHP's
// htmlspecialchars writes &#039;, quoted-printable (e-mail bodies) writes
// '=' as =3D, YAML double-quoted and Python write \xHH, TOML and YAML
// \UXXXXXXXX. All of these reached the sandbox.
func TestRedTeam3ScrubQuotingEncoders(t *testing.T) {
	sec := rt3Secret
	forms := rt3QuotedForms(sec)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Key")
		var body bytes.Buffer
		for _, f := range rt3QuotedForms(got) {
			fmt.Fprintf(&body, "%s: %s\n", f[0], f[1])
			w.Header().Add("X-Form", f[1])
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body.Bytes())
	}))
	t.Cleanup(echo.Close)
	b := startBroker(t, harnessOpts{upstream: echo.URL, env: map[string]string{"RT3_KEY": sec}, extraYAML: `  - name: quoted
    base_url: ` + echo.URL + `
    credential: {source: env, name: RT3_KEY}
    inject: {header: X-Key, format: "{secret}"}
`})
	s := b.session(trustedSession(map[string]any{"upstream": "quoted", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	r := b.do("GET", b.sandbox+"/v1/proxy/quoted/echo", s.Token, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	all := string(r.body) + "\n" + strings.Join(r.header.Values("X-Form"), "\n")
	for _, f := range forms {
		if strings.Contains(all, f[1]) || strings.Contains(all, "th=quo") || strings.Contains(all, "th=3Dquo") {
			t.Errorf("%s: the answer holds the credential: %q", f[0], f[1])
		}
	}
	if n := strings.Count(string(r.body), "[REDACTED]"); n != len(forms) {
		t.Errorf("%d of %d forms redacted:\n%s", n, len(forms), r.body)
	}
}

// rt3QuotedForms are sec as quoting encoders write it: [name, form].
func rt3QuotedForms(sec string) [][2]string {
	var csvb bytes.Buffer
	cw := csv.NewWriter(&csvb)
	_ = cw.Write([]string{sec})
	cw.Flush()
	var qp bytes.Buffer
	qw := quotedprintable.NewWriter(&qp)
	_, _ = io.WriteString(qw, sec)
	_ = qw.Close()
	py := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\t", `\t`).Replace(sec)
	return [][2]string{
		{"csv", strings.TrimSpace(csvb.String())},
		{"yaml single-quoted", "'" + strings.ReplaceAll(sec, "'", "''") + "'"},
		{"python repr", "'" + py + "'"},
		{"shell quote", "'" + strings.ReplaceAll(sec, "'", `'\''`) + "'"},
		{"php htmlspecialchars", strings.NewReplacer(`"`, "&quot;", "'", "&#039;", "<", "&lt;").Replace(sec)},
		{"quoted-printable", qp.String()},
		{"yaml double-quoted \\x", `"` + strings.NewReplacer(`"`, `\x22`, `\`, `\\`, `/`, `\x2F`).Replace(sec) + `"`},
		{"toml \\U", `"` + strings.NewReplacer(`"`, `\U00000022`, `\`, `\\`).Replace(sec) + `"`},
		{"html padded hex", strings.NewReplacer(`"`, "&#x0022;", "'", "&#x0027;", "<", "&#x003C;").Replace(sec)},
	}
}
