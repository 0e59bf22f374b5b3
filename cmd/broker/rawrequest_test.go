package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Raw sandbox requests for the REST door's attack tables: bytes sent as
// written (no client cleaning), and what the upstream received.

// rtSend sends raw bytes for a sandbox call on the api upstream and returns
// the answer and whether the upstream received anything.
func rtSend(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, req string) (brokertest.Response, *brokertest.Recorded) {
	t.Helper()
	n := len(up.Requests())
	r := b.Raw(req)
	if rs := up.Requests(); len(rs) > n {
		last := rs[len(rs)-1]
		return r, &last
	}
	return r, nil
}

func rtRequest(method, path, token string, header []string, body string) string {
	var sb strings.Builder
	sb.WriteString(method + " " + path + " HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer " + token + "\r\nConnection: close\r\n")
	for i := 0; i+1 < len(header); i += 2 {
		sb.WriteString(header[i] + ": " + header[i+1] + "\r\n")
	}
	if body != "" {
		sb.WriteString("Content-Length: " + itoa(len(body)) + "\r\n")
	}
	sb.WriteString("\r\n" + body)
	return sb.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for n > 0 {
		d = append([]byte{byte('0' + n%10)}, d...)
		n /= 10
	}
	return string(d)
}

// rtRefused sends each attack and fails unless it is refused with status
// and code, and nothing reached the upstream.
func rtRefused(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, token string, attacks []rtAttack) {
	t.Helper()
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			r, got := rtSend(t, b, up, rtRequest(a.method, a.path, token, a.header, a.body))
			if got != nil {
				t.Fatalf("%s %s %s: %d; the upstream received %s %s?%s %s", a.method, a.path, a.body, r.Status, got.Method, got.RawPath, got.RawQuery, got.Body)
			}
			p := r.WantProblem(t, a.status, a.code)
			if a.constraint != "" && p["constraint"] != a.constraint {
				t.Errorf("constraint %v, want %s", p["constraint"], a.constraint)
			}
			if strings.Contains(string(r.Body), "mallory") {
				t.Errorf("the problem echoes a value: %s", r.Body)
			}
		})
	}
}

// rtAllowed sends each request and fails unless the upstream received it.
func rtAllowed(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, token string, allowed []rtAttack) {
	t.Helper()
	for _, a := range allowed {
		r, got := rtSend(t, b, up, rtRequest(a.method, a.path, token, a.header, a.body))
		if got == nil || r.Status != http.StatusOK {
			t.Errorf("allowed %s %s %s: %d %s", a.method, a.path, a.body, r.Status, r.Body)
		}
	}
}

type rtAttack struct {
	name, method, path string
	header             []string
	body               string
	status             int
	code, constraint   string
}

var rtJSON = []string{"Content-Type", "application/json"}
