package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// A sandbox call whose upstream name (the path segment a door reads) is
// not UTF-8, or is cut mid-character by the record's bound, must not name
// a span with it: the OTLP exporter's protobuf encoding refuses a string
// field that is not UTF-8 and would drop the whole batch, every other
// session's spans with it. Every span of the calls around it arrives.
func TestAttackTraceInvalidUTF8(t *testing.T) {
	for _, path := range []string{"/v1/proxy/%FF/x", "/v1/proxy/a" + strings.Repeat("%C3%A9", 40) + "/x", "/v1/aws/%FF/"} {
		t.Run(path, func(t *testing.T) {
			up := brokertest.NewUpstream(t)
			tb := startTraced(t, fmt.Sprintf("  - name: api\n    base_url: %s\n    credential: {source: env, name: CANARY_TOKEN}\n", up.URL))
			b := &brokertest.Proc{T: t, Sandbox: tb.child.Sandbox, Control: tb.child.Control, HTTP: &http.Client{Timeout: 10 * time.Second}}
			s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/items/{id}"})))
			b.Do("GET", b.Sandbox+"/v1/proxy/api/items/1", s.Token, nil)
			b.Raw("GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.Token + "\r\nConnection: close\r\n\r\n")
			b.Do("GET", b.Sandbox+"/v1/proxy/api/items/2", s.Token, nil)
			if err := tb.stop(); err != nil {
				t.Fatalf("the broker's exit: %v", err)
			}
			calls := 0
			for _, x := range tb.recv.Spans() {
				if x.Name == "GET /items/{id}" {
					calls++
				}
			}
			if calls != 2 {
				t.Fatalf("%d spans of the two good calls arrived (%d spans in all): the batch was lost", calls, len(tb.recv.Spans()))
			}
		})
	}
}
