package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// HTTP framing at the REST door: what the broker reads of a request and
// sends on (never a second body or a forbidden header), and which response
// headers reach the sandbox.

// rt3Raw sends a raw request and reports the answer and what the upstream
// received (nil: nothing).
// Informational answers (100 Continue) are skipped.
func rt3Raw(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, req string) (brokertest.Response, *brokertest.Recorded) {
	t.Helper()
	n := len(up.Requests())
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.Sandbox, "http://"))
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
	r := brokertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	if rs := up.Requests(); len(rs) > n {
		last := rs[len(rs)-1]
		return r, &last
	}
	return r, nil
}

// TestAttackRequestFraming (DESIGN §4, headers and framing): smuggling
// shapes, HTTP/1.0, absolute-form targets, Expect, trailers, obs-fold,
// duplicated and oddly spelled forbidden headers. The broker reads the
// request once and sends its own framing, so the upstream never receives a
// forbidden header, a second body, or a header the rule did not check.
func TestAttackRequestFraming(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "POST", "path": "/pay", "constraints": map[string]any{
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
				if got != nil || r.Status < 400 {
					t.Fatalf("%d; the upstream received %v", r.Status, got)
				}
				return
			}
			if r.Status != http.StatusOK || got == nil {
				t.Fatalf("%d %s", r.Status, r.Body)
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
			if a := got.Header.Get("Authorization"); a != "Bearer "+brokertest.Canary {
				t.Errorf("the upstream received Authorization %q", a)
			}
		})
	}
	brokertest.AssertNoCanary(t, "audit", b.AuditExport())
}

// TestAttackResponseHeaders (DESIGN §4, responses): headers an upstream
// could use to hand the sandbox a credential-bearing cookie, or to smuggle
// the secret past the scrubber in a header the broker passes.
func TestAttackResponseHeaders(t *testing.T) {
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
	b := startBroker(t, brokertest.ProcOptions{Upstream: echo.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/r"})))
	r := b.Do("GET", b.Sandbox+"/v1/proxy/api/r", s.Token, nil)
	if r.Status != http.StatusTemporaryRedirect {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	for _, h := range []string{"Set-Cookie", "Set-Cookie2", "X-Leak", "Connection"} {
		if v := r.Header.Values(h); len(v) > 0 {
			t.Errorf("%s passed to the sandbox: %q", h, v)
		}
	}
	brokertest.AssertNoCanary(t, "headers", []byte(fmt.Sprint(r.Header)))
	if !strings.Contains(r.Header.Get("Location"), "[REDACTED]") {
		t.Errorf("Location: %q", r.Header.Get("Location"))
	}
}
