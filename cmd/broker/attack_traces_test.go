package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// A sandbox call whose upstream name (the path segment the REST door
// reads) is invalid UTF-8 names its span "GET \xff": the OTLP exporter's
// protobuf encoding refuses a string field that is not UTF-8, and the
// whole batch, the other calls' spans included, is lost.
func TestAttackTraceInvalidUTF8(t *testing.T) {
	for _, path := range []string{"", "/v1/proxy/%FF/x", "/v1/proxy/a" + strings.Repeat("%C3%A9", 40) + "/x", "/v1/aws/%FF/"} {
		t.Run(fmt.Sprint("upstream=", path), func(t *testing.T) { traceUTF8(t, path) })
	}
}

func traceUTF8(t *testing.T, name string) {
	attack := name != ""
	up := brokertest.NewUpstream(t)
	recv := brokertest.StartOTLP(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
enforce_isolation: false
log_level: error
upstreams:
  - name: api
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
`, filepath.Join(dir, "data"), brokertest.ProcAdminToken, up.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	defer func() { t.Logf("broker logs:\n%s", logs.String()) }()
	p := brokertest.StartChildLogs(t, cfg, []string{"CANARY_TOKEN=" + brokertest.Canary,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=600000",
		"OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=", "OTEL_TRACES_SAMPLER=", "OTEL_SDK_DISABLED=",
	}, &logs)
	exited := false
	t.Cleanup(func() {
		if !exited {
			p.Kill()
		}
	})
	b := &brokertest.Proc{T: t, Sandbox: p.Sandbox, Control: p.Control, HTTP: &http.Client{Timeout: 10 * time.Second}}
	r := b.Do("POST", p.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{
		"task_id": "traced", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
		"grants": []any{brokertest.APIGrant(map[string]any{"method": "GET", "path": "/items/{id}"})},
	})
	var s brokertest.Created
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if a := b.Do("GET", p.Sandbox+"/v1/proxy/api/items/1", s.Token, nil); a.Status != 200 {
		t.Fatalf("%d", a.Status)
	}
	if attack {
		bad := b.Raw("GET " + name + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
		t.Logf("invalid-UTF-8 upstream: %d %s", bad.Status, bad.Body)
		bad2 := b.Raw("GET /v1/proxy/api/items/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
		_ = bad2
	}
	if a := b.Do("GET", p.Sandbox+"/v1/proxy/api/items/2", s.Token, nil); a.Status != 200 {
		t.Fatalf("%d", a.Status)
	}
	if err := p.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := p.Cmd.Wait()
	exited = true
	t.Logf("exit: %v", err)
	spans := recv.Spans()
	t.Logf("%d spans received, %d exported bytes", len(spans), len(recv.Raw()))
	for _, x := range spans {
		t.Logf("span %q %v", x.Name, x.Attrs["airlock.request_id"])
	}
	if attack && len(spans) == 0 {
		t.Errorf("one sandbox request with a non-UTF-8 upstream name lost every span of the batch")
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
