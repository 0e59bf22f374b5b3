package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

func TestProxyInjectsCredentialAndScrubsAnswer(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(
		map[string]any{"method": "GET", "path": "/repos/{owner}/{repo}", "constraints": map[string]any{"path.owner": map[string]any{"pin": "acme"}}},
	)))

	r := b.Do("GET", b.Sandbox+"/v1/proxy/api/repos/acme/widgets?b=2&a=1", s.Token, nil,
		"Cookie", "sid=sandbox", "X-Forwarded-For", "10.0.0.1", "X-HTTP-Method-Override", "DELETE",
		"Proxy-Authorization", "Basic eA==", "X-Trace", "t-1", "X-Other", "dropped", "Accept", "application/json")
	if r.Status != 200 {
		t.Fatalf("allowed call: %d %s", r.Status, r.Body)
	}
	got := up.Last(t)
	if got.Header.Get("Authorization") != "Bearer "+brokertest.Canary {
		t.Errorf("upstream Authorization = %q, want the injected credential", got.Header.Get("Authorization"))
	}
	if strings.Contains(got.Header.Get("Authorization"), s.Token) {
		t.Error("the sandbox's own token reached the upstream")
	}
	for _, h := range []string{"Cookie", "X-Forwarded-For", "X-Http-Method-Override", "Proxy-Authorization", "X-Other"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("header %s reached the upstream: %q", h, v)
		}
	}
	if got.Header.Get("X-Trace") != "t-1" || got.Header.Get("Accept") != "application/json" {
		t.Errorf("allowlisted headers not forwarded: %v", got.Header)
	}
	if got.RawPath != "/base/repos/acme/widgets" || got.RawQuery != "b=2&a=1" || got.Method != "GET" {
		t.Errorf("upstream saw %s %s?%s", got.Method, got.RawPath, got.RawQuery)
	}
	if r.Header.Get("X-Airlock-Request-Id") == "" {
		t.Error("no X-Airlock-Request-Id")
	}
	if r.Header.Get("Set-Cookie") != "" {
		t.Error("Set-Cookie passed back to the sandbox")
	}
	if !bytes.Contains(r.Body, []byte("[REDACTED]")) || r.Header.Get("X-Echo-Auth") != "[REDACTED]" {
		t.Errorf("echoed credential not scrubbed: %s / %q", r.Body, r.Header.Get("X-Echo-Auth"))
	}
	brokertest.AssertNoCanary(t, "response body", r.Body)
	brokertest.AssertNoCanary(t, "response headers", []byte(fmt.Sprint(r.Header)))

	// Pinned path value: a different owner is refused and never forwarded.
	n := len(up.Requests())
	r = b.Do("GET", b.Sandbox+"/v1/proxy/api/repos/evil/widgets", s.Token, nil)
	p := r.WantProblem(t, 403, "constraint_violated")
	if p["param"] != "path.owner" || p["constraint"] != "pin" {
		t.Errorf("problem = %v", p)
	}
	if len(up.Requests()) != n {
		t.Fatal("a denied call reached the upstream")
	}
	brokertest.AssertNoCanary(t, "audit export", b.AuditExport())
}

func TestQueryInjectionAndStreaming(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(map[string]any{"task_id": "t-2", "isolation": "gvisor", "grants": []any{
		map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/big"}, map[string]any{"method": "GET", "path": "/echo"}, map[string]any{"method": "GET", "path": "/redirect"},
			map[string]any{"method": "GET", "path": "/brotli"}, map[string]any{"method": "POST", "path": "/echo"}}},
	}})
	// The sandbox cannot supply or shadow the injected query parameter.
	r := b.Do("GET", b.Sandbox+"/v1/proxy/open/echo?api_key=mine&x=1", s.Token, nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if q := up.Last(t).RawQuery; q != "x=1&api_key="+strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(brokertest.Canary, "/", "%2F"), "+", "%2B"), "=", "%3D") {
		t.Errorf("upstream query = %q", q)
	}
	brokertest.AssertNoCanary(t, "echo body", r.Body)

	r = b.Do("GET", b.Sandbox+"/v1/proxy/open/big", s.Token, nil)
	if r.Status != 200 || bytes.Count(r.Body, []byte("|")) != 2000 {
		t.Fatalf("big: %d, %d lines", r.Status, bytes.Count(r.Body, []byte("|")))
	}
	brokertest.AssertNoCanary(t, "streamed body", r.Body)

	// An answer in an encoding the broker cannot scrub is refused, not passed through.
	r = b.Do("GET", b.Sandbox+"/v1/proxy/open/brotli", s.Token, nil)
	r.WantProblem(t, 502, "upstream_error")
	brokertest.AssertNoCanary(t, "refused encoded answer", r.Body)
	// A body that claims gzip but does not decode cannot be checked: refused.
	b.Do("POST", b.Sandbox+"/v1/proxy/open/echo", s.Token, `{"a": 1}`, "Content-Encoding", "gzip").WantProblem(t, 400, "bad_request")

	// Redirects are passed back, never followed, and scrubbed.
	r = b.Do("GET", b.Sandbox+"/v1/proxy/open/redirect", s.Token, nil)
	if r.Status != http.StatusFound {
		t.Fatalf("redirect: %d", r.Status)
	}
	brokertest.AssertNoCanary(t, "Location", []byte(r.Header.Get("Location")))
	for _, rec := range up.Requests() {
		if rec.RawPath == "/steal" {
			t.Fatal("the broker followed a redirect")
		}
	}
}

func TestPinsFilledAndBodyChecked(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "max_uses": 3, "budget": map[string]any{"body.amount": 100},
		"rules": []any{map[string]any{"method": "POST", "path": "/payments", "deny_unknown": true, "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"min": 1, "max": 80, "required": true},
		}}}}))
	pay := func(body string) brokertest.Response {
		return b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, body)
	}
	if r := pay(`{"amount": 60}`); r.Status != 200 {
		t.Fatalf("payment: %d %s", r.Status, r.Body)
	}
	var sent map[string]any
	if err := json.Unmarshal(up.Last(t).Body, &sent); err != nil || sent["to"] != "acme" || sent["amount"] != float64(60) {
		t.Fatalf("upstream body = %s", up.Last(t).Body)
	}
	n := len(up.Requests())
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"amount": 10, "to": "mallory"}`, 403, "constraint_violated"},
		{`{"amount": 10, "amount": 10000}`, 400, "bad_request"},
		{`{"amount": 10, "cc": "mallory"}`, 403, "constraint_violated"},
		{`{"amount": 81}`, 403, "constraint_violated"},
		{`{"amount": 50}`, 403, "budget_exceeded"},
		{`{"amount": -100}`, 403, "constraint_violated"},
		{`{"amount": `, 400, "bad_request"},
	} {
		pay(tc.body).WantProblem(t, tc.status, tc.code)
	}
	if len(up.Requests()) != n {
		t.Fatal("a refused payment reached the upstream")
	}
	if r := pay(`{"amount": 40}`); r.Status != 200 {
		t.Fatalf("second payment: %d %s", r.Status, r.Body)
	}
	pay(`{"amount": 0}`).WantProblem(t, 403, "constraint_violated")
	if r := pay(`{"amount": 1}`); r.Status != 403 {
		t.Fatalf("third payment over budget: %d %s", r.Status, r.Body)
	}
	// Oversized body: refused before it is read (max_body 4096).
	pay(`{"amount": 1, "pad": "`+strings.Repeat("x", 5000)+`"}`).WantProblem(t, 413, "bad_request")

	recs := brokertest.ParseAudit(t, b.AuditExport())
	var allowed, denied int
	for _, r := range recs {
		switch r.Type {
		case "call.allowed":
			allowed++
		case "call.denied":
			denied++
			if r.Code == "" {
				t.Errorf("denial without a code: %+v", r)
			}
		}
	}
	if allowed != 2 || denied < 9 {
		t.Errorf("audit: %d allowed, %d denied", allowed, denied)
	}
}

func TestCanonicalizationAttacks(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(
		map[string]any{"method": "GET", "path": "/public/{name}"},
		map[string]any{"method": "GET", "path": "/search", "constraints": map[string]any{"query.org": map[string]any{"pin": "acme"}}},
	)))
	for _, path := range []string{
		"/v1/proxy/api/public/../admin",
		"/v1/proxy/api/public/%2e%2e/admin",
		"/v1/proxy/api/public/%2E%2e",
		"/v1/proxy/api/public//x",
		"/v1/proxy/api/public/a%2Fb",
		"/v1/proxy/api/public/a%5Cb",
		"/v1/proxy/api/public/a%00",
		"/v1/proxy/api/public/%61dmin",
		"/v1/proxy/api/public/./x",
		"/v1/proxy/api/public/x?a=1;b=2",
		"/v1/proxy/api/public/x?_method=DELETE",
	} {
		r := b.Raw("GET " + path + " HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
		r.WantProblem(t, 400, "bad_request")
	}
	// An escaped upstream name names no upstream.
	b.Raw("GET /v1/proxy/%61pi/public/x HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer "+s.Token+"\r\nConnection: close\r\n\r\n").WantProblem(t, 404, "not_found")
	b.Do("GET", b.Sandbox+"/v1/proxy/api/search?org=acme&org=evil", s.Token, nil).WantProblem(t, 403, "constraint_violated")
	b.Do("GET", b.Sandbox+"/v1/proxy/api/search?org=evil", s.Token, nil).WantProblem(t, 403, "constraint_violated")
	b.Do("TRACE", b.Sandbox+"/v1/proxy/api/public/x", s.Token, nil).WantProblem(t, 405, "bad_request")
	b.Do("POST", b.Sandbox+"/v1/proxy/api/public/x", s.Token, nil, "X-HTTP-Method-Override", "GET").WantProblem(t, 403, "no_matching_grant")
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d attacking requests reached the upstream", n)
	}
	// The canonical form goes through, with the pinned query filled in.
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/search?q=x", s.Token, nil); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if q := up.Last(t).RawQuery; q != "q=x&org=acme" {
		t.Errorf("forwarded query %q", q)
	}
}

func TestTokenAttacks(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	rules := map[string]any{"method": "GET", "path": "/ok"}
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(rules)))
	url := b.Sandbox + "/v1/proxy/api/ok"
	if r := b.Do("GET", url, s.Token, nil); r.Status != 200 {
		t.Fatalf("valid token: %d %s", r.Status, r.Body)
	}
	parts := strings.Split(s.Token, ".")
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "airlock", "aud": "airlock-sandbox", "sub": s.ID, "jti": "x",
		"iat": time.Now().Unix(), "nbf": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("guessed-key-guessed-key-guessed-key!"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": "airlock", "aud": "airlock-sandbox", "sub": s.ID}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for name, tok := range map[string]string{
		"forged signature": forged,
		"alg none":         none,
		"truncated":        parts[0] + "." + parts[1] + ".",
		"signature swap":   parts[0] + "." + parts[1] + "." + strings.Split(forged, ".")[2],
		"admin token":      brokertest.ProcAdminToken,
		"garbage":          "abc",
	} {
		t.Run(name, func(t *testing.T) {
			b.Do("GET", url, tok, nil).WantProblem(t, 401, "invalid_token")
		})
	}
	b.Do("GET", url, "", nil).WantProblem(t, 401, "invalid_token")

	// A session token is worthless on the control plane.
	b.Do("GET", b.Control+"/v1/sessions", s.Token, nil).WantProblem(t, 401, "invalid_token")
	b.Do("POST", b.Control+"/v1/sessions", s.Token, brokertest.TrustedSession(brokertest.APIGrant(rules))).WantProblem(t, 401, "invalid_token")
	// And the control plane's routes do not exist on the sandbox plane.
	b.Do("GET", b.Sandbox+"/v1/sessions", brokertest.ProcAdminToken, nil).WantProblem(t, 404, "not_found")

	// bind_cidr: the token only works from its address range.
	bound := brokertest.TrustedSession(brokertest.APIGrant(rules))
	bound["bind_cidr"] = "10.20.0.0/16"
	bs := b.Session(bound)
	b.Do("GET", url, bs.Token, nil).WantProblem(t, 401, "invalid_token")
	local := brokertest.TrustedSession(brokertest.APIGrant(rules))
	local["bind_cidr"] = "127.0.0.1"
	ls := b.Session(local)
	if r := b.Do("GET", url, ls.Token, nil); r.Status != 200 {
		t.Fatalf("bound to 127.0.0.1: %d %s", r.Status, r.Body)
	}

	// Killed: at once.
	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	b.Do("GET", url, s.Token, nil).WantProblem(t, 401, "session_revoked")
}

func TestKillCancelsInFlightCall(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/slow"})))
	res := make(chan brokertest.Response, 1)
	go func() { res <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	select {
	case <-up.Started:
	case <-time.After(10 * time.Second):
		t.Fatal("slow call never reached the upstream")
	}
	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill: %d", r.Status)
	}
	select {
	case r := <-res:
		r.WantProblem(t, 401, "session_revoked")
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight call was not cancelled by the kill")
	}
	var sess map[string]any
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil).Body, &sess)
	if sess["status"] != "revoked" || sess["revoked_at"] == nil {
		t.Errorf("killed session = %v", sess)
	}
}

func TestKillswitchSurvivesRestart(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	var op map[string]any
	_ = json.Unmarshal(b.Do("POST", b.Control+"/v1/tokens", brokertest.ProcAdminToken, map[string]any{"role": "operator", "name": "orchestrator"}).Body, &op)
	opToken := op["token"].(string)

	if r := b.Do("POST", b.Control+"/v1/killswitch", opToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage: %d %s", r.Status, r.Body)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	b.Do("DELETE", b.Control+"/v1/killswitch", opToken, nil).WantProblem(t, 403, "forbidden")

	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")
	if r := b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	// The session, its token and the operator token survived the restart.
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("after release: %d %s", r.Status, r.Body)
	}
	if r := b.Do("GET", b.Control+"/v1/sessions/"+s.ID, opToken, nil); r.Status != 200 {
		t.Fatalf("operator token after restart: %d", r.Status)
	}
	var v map[string]any
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/verify", brokertest.ProcAdminToken, nil).Body, &v)
	if v["ok"] != true {
		t.Fatalf("audit chain after restart: %v", v)
	}
}

func TestUsageSurvivesRestart(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api", "max_uses": 2, "rules": []any{map[string]any{"method": "GET", "path": "/ok"}}}))
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatal(r.Status)
	}
	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatal(r.Status)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 403, "grant_exhausted")
}

func TestRolesAndTokens(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	token := func(role string) (string, string) {
		var out map[string]any
		r := b.Do("POST", b.Control+"/v1/tokens", brokertest.ProcAdminToken, map[string]any{"role": role, "name": role + "-1", "ttl": "1h"})
		if r.Status != 201 {
			t.Fatalf("create %s token: %d %s", role, r.Status, r.Body)
		}
		_ = json.Unmarshal(r.Body, &out)
		return out["id"].(string), out["token"].(string)
	}
	_, op := token("operator")
	_, rev := token("reviewer")
	audID, aud := token("auditor")
	req := brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}))

	if r := b.Do("POST", b.Control+"/v1/sessions", op, req); r.Status != 201 {
		t.Fatalf("operator creates a session: %d", r.Status)
	}
	b.Do("POST", b.Control+"/v1/sessions", rev, req).WantProblem(t, 403, "forbidden")
	b.Do("POST", b.Control+"/v1/sessions", aud, req).WantProblem(t, 403, "forbidden")
	b.Do("POST", b.Control+"/v1/tokens", op, map[string]any{"role": "admin", "name": "x"}).WantProblem(t, 403, "forbidden")
	b.Do("GET", b.Control+"/v1/audit", op, nil).WantProblem(t, 403, "forbidden")
	if r := b.Do("GET", b.Control+"/v1/audit", aud, nil); r.Status != 200 {
		t.Fatalf("auditor export: %d", r.Status)
	}
	var list map[string][]map[string]any
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/tokens", brokertest.ProcAdminToken, nil).Body, &list)
	for _, it := range list["items"] {
		if _, ok := it["token"]; ok {
			t.Fatal("token list reveals a secret")
		}
	}
	if r := b.Do("DELETE", b.Control+"/v1/tokens/"+audID, brokertest.ProcAdminToken, nil); r.Status != 204 {
		t.Fatalf("revoke: %d", r.Status)
	}
	b.Do("GET", b.Control+"/v1/audit", aud, nil).WantProblem(t, 401, "invalid_token")
	b.Do("POST", b.Control+"/v1/tokens", brokertest.ProcAdminToken, map[string]any{"role": "root", "name": "x"}).WantProblem(t, 400, "bad_request")
	// Token ids are HMAC'd in the audit log: it names the operator's token by its audit_id only.
	export := b.AuditExport()
	if bytes.Contains(export, []byte("tok_")) {
		t.Fatal("the audit log carries a raw API token id")
	}
	var toks struct {
		Items []struct {
			Name    string `json:"name"`
			AuditID string `json:"audit_id"`
		} `json:"items"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/tokens", brokertest.ProcAdminToken, nil).Body, &toks)
	for _, tk := range toks.Items {
		if tk.Name == "operator-1" && !bytes.Contains(export, []byte(tk.AuditID)) {
			t.Fatalf("the operator's session creation is not attributed to %s", tk.AuditID)
		}
	}
}

func TestBadInputKeepsServing(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	good := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	sessions := b.Control + "/v1/sessions"
	tests := []struct {
		name      string
		body      any
		status    int
		code      string
		wantField string
	}{
		{name: "malformed JSON", body: `{"task_id": `, status: 400, code: "bad_request"},
		{name: "unknown field", body: `{"task_id": "t", "tll": "5m"}`, status: 400, code: "bad_request"},
		{name: "wrong type", body: `{"task_id": 5}`, status: 400, code: "bad_request"},
		{name: "ttl over max", body: map[string]any{"task_id": "t", "ttl": "2h"}, status: 400, code: "bad_request", wantField: "ttl"},
		{name: "no task", body: map[string]any{"ttl": "2m"}, status: 400, code: "bad_request", wantField: "task_id"},
		{name: "unknown upstream in grant", body: brokertest.TrustedSession(map[string]any{"upstream": "nope", "rules": []any{map[string]any{"method": "GET", "path": "/"}}}), status: 400, code: "bad_request", wantField: "grants[0].upstream"},
		{name: "malformed rule", body: brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/a/{id}", "constraints": map[string]any{"path.id": map[string]any{"pattern": "("}}})), status: 400, code: "bad_request", wantField: "grants[0].rules[0].constraints.path.id"},
		{name: "object pin", body: brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "POST", "path": "/a", "constraints": map[string]any{"body.x": map[string]any{"pin": map[string]any{}}}})), status: 400, code: "bad_request", wantField: "grants[0].rules[0].constraints.body.x.pin"},
		{name: "isolation too weak", body: map[string]any{"task_id": "t", "isolation": "container", "grants": []any{brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})}}, status: 400, code: "isolation_too_weak"},
		{name: "bad isolation", body: map[string]any{"task_id": "t", "isolation": "vm"}, status: 400, code: "bad_request", wantField: "isolation"},
		{name: "bad cidr", body: map[string]any{"task_id": "t", "isolation": "microvm", "bind_cidr": "nope"}, status: 400, code: "bad_request", wantField: "bind_cidr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := b.Do("POST", sessions, brokertest.ProcAdminToken, tt.body).WantProblem(t, tt.status, tt.code)
			if tt.wantField != "" && p["field"] != tt.wantField {
				t.Errorf("field = %v, want %s (%v)", p["field"], tt.wantField, p["detail"])
			}
		})
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/nope/x", good.Token, nil).WantProblem(t, 404, "not_found")
	b.Do("GET", b.Control+"/v1/sessions/ses_nope", brokertest.ProcAdminToken, nil).WantProblem(t, 404, "not_found")
	b.Do("GET", b.Control+"/v1/grants/grt_nope", brokertest.ProcAdminToken, nil).WantProblem(t, 404, "not_found")
	// After all of it, the broker still serves.
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", good.Token, nil); r.Status != 200 {
		t.Fatalf("broker stopped serving: %d %s", r.Status, r.Body)
	}
}

func TestGrantLifecycleAndGatedCall(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	// Untrusted input (the default) + sensitive upstream + irreversible rule: gated.
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-g", "isolation": "microvm", "grants": []any{
		brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "POST", "path": "/issues"}),
	}})
	var s struct {
		ID        string `json:"id"`
		Token     string `json:"token"`
		RuleOfTwo struct {
			Gated bool   `json:"gated"`
			Hint  string `json:"hint"`
		} `json:"rule_of_two"`
		Required string `json:"required_isolation"`
		Grants   []struct {
			ID string `json:"id"`
		} `json:"grants"`
	}
	_ = json.Unmarshal(r.Body, &s)
	if r.Status != 201 || !s.RuleOfTwo.Gated || s.RuleOfTwo.Hint == "" || s.Required != "microvm" {
		t.Fatalf("gated session: %d %s", r.Status, r.Body)
	}
	if r := b.Do("POST", b.Sandbox+"/v1/proxy/api/issues", s.Token, `{"title": "x"}`); r.Status != http.StatusAccepted {
		t.Fatalf("irreversible call in a gated session: %d %s", r.Status, r.Body)
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
		t.Fatalf("reversible call in a gated session: %d", r.Status)
	}
	// Add a grant, then revoke it: effective at once.
	var g struct {
		ID string `json:"id"`
	}
	gr := b.Do("POST", b.Control+"/v1/sessions/"+s.ID+"/grants", brokertest.ProcAdminToken, map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/x"}}})
	_ = json.Unmarshal(gr.Body, &g)
	if gr.Status != 201 || g.ID == "" {
		t.Fatalf("add grant: %d %s", gr.Status, gr.Body)
	}
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/open/x", s.Token, nil); r.Status != 200 {
		t.Fatalf("new grant: %d", r.Status)
	}
	if r := b.Do("DELETE", b.Control+"/v1/grants/"+g.ID, brokertest.ProcAdminToken, nil); r.Status != 200 || !bytes.Contains(r.Body, []byte(`"status":"revoked"`)) {
		t.Fatalf("revoke grant: %d %s", r.Status, r.Body)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/open/x", s.Token, nil).WantProblem(t, 403, "no_matching_grant")
}

func TestUpstreamTimeout(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, Timeout: "200ms"})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/slow"})))
	b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil).WantProblem(t, 504, "upstream_timeout")
}

func TestConcurrentCallsAllAudited(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	var wg sync.WaitGroup
	ids := make(chan string, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
			if r.Status == 200 {
				ids <- r.Header.Get("X-Airlock-Request-Id")
			}
		}()
	}
	wg.Wait()
	close(ids)
	recs := brokertest.ParseAudit(t, b.AuditExport())
	allowed := map[string]bool{}
	for _, r := range recs {
		if r.Type == "call.allowed" {
			allowed[r.RequestID] = true
		}
	}
	n := 0
	for id := range ids {
		n++
		if !allowed[id] {
			t.Fatalf("call %s succeeded without an allowed record", id)
		}
	}
	if n != 200 {
		t.Fatalf("%d of 200 calls succeeded", n)
	}
}
