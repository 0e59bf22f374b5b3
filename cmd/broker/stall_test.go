package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestStalledBodyIsCut: a sandbox that sends a request's headers and then
// stops sending its body holds its connection only for body_idle_timeout:
// it gets 408 and nothing reaches the upstream, while others are served.
// The deadline is for the body only: a call held for a reviewer's decision
// past the idle timeout is not cut by it.
func TestStalledBodyIsCut(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: "body_idle_timeout: 300ms\n"})
	alice := b.NewToken("reviewer", "alice")
	gated := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "POST", "path": "/items"})))

	// A call held for a decision, its body fully sent.
	held := make(chan brokertest.Response, 1)
	go func() {
		held <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 3}`, "Prefer", "wait=60")
	}()
	id := b.PendingAction(t, alice)

	// A body that stops after 10 of its 100 bytes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.Sandbox, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hung test, not a measurement
	fmt.Fprintf(conn, "POST /v1/proxy/api/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\": 1, ", s.Token)
	// Others are served while it stalls.
	if r := b.Do("POST", b.Sandbox+"/v1/proxy/api/items", s.Token, `{"b": 2}`); r.Status != 200 {
		t.Fatalf("a bystander's call while a body stalls: %d %s", r.Status, r.Body)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the stalled body got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"bad_request"`) {
		t.Fatalf("stalled body: %d %s", resp.StatusCode, body)
	}
	brokertest.AssertNoCanary(t, "408", body)
	for _, rec := range up.Requests() {
		if strings.Contains(string(rec.Body), `"a"`) {
			t.Fatal("the stalled request reached the upstream")
		}
	}

	// More than the idle timeout has passed (the stall was cut): the held
	// call is still waiting, and gets the upstream's answer once approved.
	select {
	case r := <-held:
		t.Fatalf("the held call ended before its decision: %d %s", r.Status, r.Body)
	default:
	}
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", alice, map[string]any{}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-held:
		if r.Status != 200 {
			t.Fatalf("the held call after approval: %d %s", r.Status, r.Body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held call did not return after approval")
	}
}
