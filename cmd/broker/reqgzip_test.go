package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// gzipped compresses s.
func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGzipRequestBody: a gzip request body (git compresses its larger
// fetch negotiations) is decoded, checked like any body, and sent decoded
// without Content-Encoding; a pin cannot be dodged by compressing the
// body; a small body inflating past max_body, other codings, a list of
// codings and a body that does not decode are refused, and nothing is sent.
func TestGzipRequestBody(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "api",
		"rules": []any{map[string]any{"method": "POST", "path": "/payments", "constraints": map[string]any{
			"body.to": map[string]any{"pin": "acme"}, "body.amount": map[string]any{"max": 80},
		}}}}))
	post := func(body string, hdr ...string) brokertest.Response {
		return b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, body, hdr...)
	}

	if r := post(gzipped(t, `{"to": "acme", "amount": 60}`), "Content-Encoding", "gzip"); r.Status != 200 {
		t.Fatalf("gzip body within the grant: %d %s", r.Status, r.Body)
	}
	got := up.Last(t)
	if ce := got.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("the upstream got Content-Encoding %q; the body goes on decoded", ce)
	}
	var sent map[string]any
	if err := json.Unmarshal(got.Body, &sent); err != nil || sent["to"] != "acme" || sent["amount"] != float64(60) {
		t.Fatalf("upstream body = %q (%v), want the decoded JSON", got.Body, err)
	}
	n := len(up.Requests())

	// Compression hides nothing from the checks.
	post(gzipped(t, `{"to": "mallory", "amount": 60}`), "Content-Encoding", "gzip").WantProblem(t, 403, "constraint_violated")
	post(gzipped(t, `{"to": "acme", "amount": 8000}`), "Content-Encoding", "x-gzip").WantProblem(t, 403, "constraint_violated")
	post(gzipped(t, `{"to": "acme", "TO": "mallory"}`), "Content-Encoding", "GZIP").WantProblem(t, 400, "bad_request")
	// A bomb: 2 MB of spaces compress to about 2 KB, under max_body (4 KB).
	bomb := gzipped(t, `{"to": "acme"`+strings.Repeat(" ", 2<<20)+`}`)
	if len(bomb) > 4096 {
		t.Fatalf("bomb is %d bytes compressed", len(bomb))
	}
	post(bomb, "Content-Encoding", "gzip").WantProblem(t, http.StatusRequestEntityTooLarge, "bad_request")
	for _, enc := range [][]string{
		{"Content-Encoding", "br"},
		{"Content-Encoding", "gzip, gzip"},
		{"Content-Encoding", "deflate"},
	} {
		post(gzipped(t, `{"to": "acme"}`), enc...).WantProblem(t, 400, "bad_request")
	}
	post(`{"to": "acme"}`, "Content-Encoding", "gzip").WantProblem(t, 400, "bad_request")                        // not gzip
	post(gzipped(t, `{"to": "acme"}`)+"trailing", "Content-Encoding", "gzip").WantProblem(t, 400, "bad_request") // garbage after the stream
	if m := len(up.Requests()); m != n {
		t.Fatalf("refused bodies reached the upstream: %d requests, want %d", m, n)
	}
}
