package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// hmacUpstream is a loopback API that authenticates each request by its
// HMAC-SHA256 signature under the canary key (the broker's documented
// default canonical string), as Stripe- or Slack-style webhooks and
// signing APIs do; it answers 401 to a bad signature.
type hmacUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	verified []*http.Request
	bodies   [][]byte
	rejected int
}

func hmacVerify(key string, r *http.Request, body []byte) bool {
	ts, sig, ok := strings.Cut(strings.TrimPrefix(r.Header.Get("X-Signature"), "t="), ",v1=")
	if !ok {
		return false
	}
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(r.Method + "\n" + r.URL.EscapedPath() + "\n" + r.URL.RawQuery + "\n" + ts + "\n" + hex.EncodeToString(sum[:])))
	return hmac.Equal([]byte(sig), []byte(hex.EncodeToString(m.Sum(nil))))
}

func newHMACUpstream(t *testing.T) *hmacUpstream {
	u := &hmacUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		defer u.mu.Unlock()
		if !hmacVerify(brokertest.Canary, r, body) {
			u.rejected++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		u.verified = append(u.verified, r.Clone(r.Context()))
		u.bodies = append(u.bodies, body)
		w.Header().Set("Content-Type", "application/json")
		// An upstream that echoes its key: the broker must scrub it.
		_, _ = w.Write([]byte(`{"ok":true,"echo":"` + brokertest.Canary + `"}`))
	}))
	t.Cleanup(u.Close)
	return u
}

// TestHMACSigningThroughBroker: the broker signs the request it checked and
// sends (pinned query filled in, body as sent) with the upstream's secret;
// the upstream verifies it; a request altered after signing fails; the key
// never reaches the sandbox nor the upstream as a value.
func TestHMACSigningThroughBroker(t *testing.T) {
	up := newHMACUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: `  - name: signed
    base_url: ` + up.URL + `/v2
    credential: {source: env, name: CANARY_TOKEN}
    inject: {hmac: {header: X-Signature, algorithm: sha256}}
`})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "signed", "rules": []any{
		map[string]any{"method": "GET", "path": "/items/{id}", "constraints": map[string]any{"query.org": map[string]any{"pin": "acme"}}},
		map[string]any{"method": "POST", "path": "/charges", "irreversible": false},
	}}))

	r := b.Do("GET", b.Sandbox+"/v1/proxy/signed/items/a%20b?limit=5", s.Token, nil)
	if r.Status != 200 {
		t.Fatalf("GET: %d %s", r.Status, r.Body)
	}
	brokertest.AssertNoCanary(t, "the signed answer", r.Body)
	for k, vs := range r.Header {
		brokertest.AssertNoCanary(t, "header "+k, []byte(strings.Join(vs, ",")))
	}
	r = b.Do("POST", b.Sandbox+"/v1/proxy/signed/charges", s.Token, map[string]any{"amount": 5})
	if r.Status != 200 {
		t.Fatalf("POST: %d %s", r.Status, r.Body)
	}

	up.mu.Lock()
	got := up.verified
	bodies := up.bodies
	up.mu.Unlock()
	if len(got) != 2 || up.rejected != 0 {
		t.Fatalf("the upstream verified %d and rejected %d requests", len(got), up.rejected)
	}
	if q := got[0].URL.RawQuery; !strings.Contains(q, "org=acme") || !strings.Contains(q, "limit=5") {
		t.Fatalf("the signed query %q is not the checked one with its pin", q)
	}
	if p := got[0].URL.EscapedPath(); p != "/v2/items/a%20b" {
		t.Fatalf("signed path %q", p)
	}
	for _, req := range got {
		if req.Header.Get("Authorization") != "" {
			t.Fatal("an hmac upstream got an Authorization header")
		}
		for k, vs := range req.Header {
			brokertest.AssertNoCanary(t, "upstream header "+k, []byte(strings.Join(vs, ",")))
		}
	}

	// Tampering after signing: the broker's signature with another body, another path or another query fails.
	tamper := []struct {
		name          string
		method, path  string
		body          []byte
		keepSignature *http.Request
	}{
		{"body changed", "POST", "/v2/charges", []byte(`{"amount":5000}`), got[1]},
		{"path changed", "GET", "/v2/items/other?" + got[0].URL.RawQuery, nil, got[0]},
		{"query changed", "GET", "/v2/items/a%20b?" + strings.Replace(got[0].URL.RawQuery, "acme", "evil", 1), nil, got[0]},
		{"method changed", "DELETE", got[0].URL.RequestURI(), nil, got[0]},
	}
	for _, tt := range tamper {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, up.URL+tt.path, bytes.NewReader(tt.body))
			req.Header.Set("X-Signature", tt.keepSignature.Header.Get("X-Signature"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a tampered request answered %d", resp.StatusCode)
			}
		})
	}
	// The untampered replay still verifies: the check above is the signature's, not the fake's.
	req, _ := http.NewRequest("POST", up.URL+"/v2/charges", bytes.NewReader(bodies[1]))
	req.Header.Set("X-Signature", got[1].Header.Get("X-Signature"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the untampered request answered %d", resp.StatusCode)
	}
	brokertest.AssertNoCanary(t, "audit export", b.AuditExport())
}
