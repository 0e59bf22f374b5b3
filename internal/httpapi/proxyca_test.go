package httpapi_test

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// proxyEnv is a control plane whose broker gives sessions a CA (proxyCA)
// and advertises a proxy address, with an upstream "gh" that has a placeholder.
func proxyEnv(t *testing.T, proxyCA bool) (*httptest.Server, *bytes.Buffer) {
	t.Helper()
	base, _ := url.Parse("http://127.0.0.1:1")
	ph, err := upstream.ParsePlaceholder("GITHUB_TOKEN", "ghp_{random:36}")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream.Upstream{Name: "gh", Kind: "http", BaseURL: base, Placeholder: ph}
	src, err := upstream.NewEnvSource("GH", func(string) string { return "CANARY-gh" })
	if err != nil {
		t.Fatal(err)
	}
	u.Source = src
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	k := brokertest.MustOpenBroker(t, brokertest.WithUpstream(u),
		brokertest.WithOptions(func(o *broker.Options) { o.ProxyCA, o.Log = proxyCA, log }))
	api, err := httpapi.New(k.Broker, log, httpapi.UIOptions{ProxyURL: "127.0.0.1:8702"})
	if err != nil {
		t.Fatal(err)
	}
	control := httptest.NewServer(api.Handler(httpapi.ControlPlane))
	t.Cleanup(control.Close)
	return control, logs
}

// get answers a GET with a bearer token: status, content type, body.
func get(t *testing.T, u, token string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

type sessionAnswer struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	Proxy *struct {
		URL   string `json:"url"`
		CAPEM string `json:"ca_pem"`
	} `json:"proxy"`
	Placeholders map[string]string `json:"placeholders"`
}

// TestSessionProxyAnswer: with the proxy door on, the creation answer
// carries the proxy URL with the token as its password (once), the CA and
// the placeholders; GET repeats the CA and placeholders, never the token.
func TestSessionProxyAnswer(t *testing.T) {
	control, logs := proxyEnv(t, true)
	var created sessionAnswer
	var raw []json.RawMessage
	if status := callJSON(t, "POST", control.URL+"/v1/sessions", admin, `{"task_id": "t", "ttl": "20m", "untrusted_input": false}`, &created); status != 201 {
		t.Fatalf("create: %d", status)
	}
	if created.Proxy == nil {
		t.Fatal("no proxy object in the creation answer")
	}
	if want := "http://airlock:" + created.Token + "@127.0.0.1:8702"; created.Proxy.URL != want {
		t.Errorf("proxy url %q, want %q", created.Proxy.URL, want)
	}
	block, _ := pem.Decode([]byte(created.Proxy.CAPEM))
	if block == nil {
		t.Fatal("ca_pem is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA || !strings.Contains(ca.Subject.CommonName, created.ID) {
		t.Fatalf("ca_pem: %v %+v", err, ca)
	}
	if ca.NotAfter.After(time.Now().Add(20*time.Minute)) || ca.NotAfter.Before(time.Now().Add(19*time.Minute)) {
		t.Errorf("CA NotAfter %v is not the session's expiry", ca.NotAfter)
	}
	if !regexp.MustCompile(`^ghp_[A-Za-z0-9]{36}$`).MatchString(created.Placeholders["GITHUB_TOKEN"]) || len(created.Placeholders) != 1 {
		t.Errorf("placeholders %v", created.Placeholders)
	}

	var got sessionAnswer
	if status := callJSON(t, "GET", control.URL+"/v1/sessions/"+created.ID, admin, "", &got); status != 200 {
		t.Fatalf("get: %d", status)
	}
	if got.Token != "" || got.Proxy == nil || got.Proxy.URL != "http://127.0.0.1:8702" || got.Proxy.CAPEM != created.Proxy.CAPEM {
		t.Errorf("GET answer: token %q proxy %+v", got.Token, got.Proxy)
	}
	if got.Placeholders["GITHUB_TOKEN"] != created.Placeholders["GITHUB_TOKEN"] {
		t.Errorf("GET placeholders %v, want the creation's %v", got.Placeholders, created.Placeholders)
	}
	// Every answer about the session, the CA route and the logs: no private key.
	var list struct{ Items []json.RawMessage }
	callJSON(t, "GET", control.URL+"/v1/sessions", admin, "", &list)
	raw = append(raw, list.Items...)
	_, _, pemBody := get(t, control.URL+"/v1/sessions/"+created.ID+"/ca.pem", admin)
	var killed json.RawMessage
	callJSON(t, "DELETE", control.URL+"/v1/sessions/"+created.ID, admin, "", &killed)
	for _, data := range append(raw, pemBody, killed, logs.Bytes()) {
		if bytes.Contains(data, []byte("PRIVATE KEY")) || bytes.Contains(data, []byte("SealedKey")) || bytes.Contains(data, []byte("sealed")) {
			t.Fatalf("an answer or the logs carry the CA key: %s", data)
		}
	}
}

// TestSessionCARoute: GET /v1/sessions/{id}/ca.pem serves the PEM to
// operators and admins only; 404 for an unknown session and for a session
// created while the proxy door was off.
func TestSessionCARoute(t *testing.T) {
	control, _ := proxyEnv(t, true)
	var s sessionAnswer
	callJSON(t, "POST", control.URL+"/v1/sessions", admin, `{"task_id": "t", "untrusted_input": false}`, &s)
	tokens := map[string]string{}
	for _, role := range []string{"operator", "reviewer", "auditor"} {
		var tok struct{ Token string }
		if status := callJSON(t, "POST", control.URL+"/v1/tokens", admin, `{"role": "`+role+`", "name": "`+role+`"}`, &tok); status != 201 || tok.Token == "" {
			t.Fatalf("token for %s: %d", role, status)
		}
		tokens[role] = tok.Token
	}
	for _, tc := range []struct {
		name, token, id string
		status          int
		code            string
	}{
		{"admin", admin, s.ID, 200, ""},
		{"operator", tokens["operator"], s.ID, 200, ""},
		{"reviewer", tokens["reviewer"], s.ID, 403, "forbidden"},
		{"auditor", tokens["auditor"], s.ID, 403, "forbidden"},
		{"no token", "", s.ID, 401, "invalid_token"},
		{"unknown session", admin, "ses_nope", 404, "not_found"},
		{"session token", s.Token, s.ID, 401, "invalid_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, body := get(t, control.URL+"/v1/sessions/"+tc.id+"/ca.pem", tc.token)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.status == 200 {
				if ctype != "application/x-pem-file" || string(body) != s.Proxy.CAPEM {
					t.Errorf("answer %s %q, want the session's CA PEM", ctype, body)
				}
				return
			}
			var p map[string]any
			if ctype != "application/problem+json" || json.Unmarshal(body, &p) != nil || p["code"] != tc.code {
				t.Errorf("answer %s %s, want problem %s", ctype, body, tc.code)
			}
		})
	}

	off, _ := proxyEnv(t, false)
	var plain sessionAnswer
	callJSON(t, "POST", off.URL+"/v1/sessions", admin, `{"task_id": "t", "untrusted_input": false}`, &plain)
	if plain.Proxy != nil || plain.Placeholders != nil {
		t.Errorf("with the door off the answer has proxy %+v placeholders %v", plain.Proxy, plain.Placeholders)
	}
	status, ctype, body := get(t, off.URL+"/v1/sessions/"+plain.ID+"/ca.pem", admin)
	if status != 404 || ctype != "application/problem+json" || !bytes.Contains(body, []byte("no proxy CA")) {
		t.Errorf("ca.pem without a CA: %d %s %s", status, ctype, body)
	}
}
