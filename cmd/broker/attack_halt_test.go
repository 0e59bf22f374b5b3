package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// haltStreamer is an upstream that streams a line every few milliseconds
// until its client goes away, and says when that happened.
type haltStreamer struct {
	*httptest.Server
	started chan struct{}
	gone    chan struct{}
}

func newHaltStreamer(t *testing.T) *haltStreamer {
	s := &haltStreamer{started: make(chan struct{}, 1), gone: make(chan struct{}, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fl := w.(http.Flusher)
		notifyOnce(s.started)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				break
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				notifyOnce(s.gone)
				return
			case <-tick.C:
			}
		}
		<-r.Context().Done()
		notifyOnce(s.gone)
	}))
	t.Cleanup(s.Close)
	return s
}

// notifyOnce tells a waiter without blocking the handler (one signal is kept
// until read; a test with several streams waits on the first).
func notifyOnce(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// The global kill-switch ends what is running: a response being streamed
// is cut off, and the upstream sees its request cancelled, once the switch
// is acknowledged (not when the upstream decides to stop).
func TestKillswitchCutsStreamingCall(t *testing.T) {
	up := brokertest.NewUpstream(t)
	st := newHaltStreamer(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: fmt.Sprintf(`  - name: stream
    base_url: %s
    sensitive: false
    timeout: 5m
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
`, st.URL)})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "stream", "rules": []any{map[string]any{"method": "GET", "path": "/feed"}}}))

	req, _ := http.NewRequest("GET", b.Sandbox+"/v1/proxy/stream/feed", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatalf("first line: %v", err)
	}
	<-st.started

	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage: %d %s", r.Status, r.Body)
	}
	// Acknowledged: the upstream call is cancelled and the stream ends.
	select {
	case <-st.gone:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream call was still running after the kill-switch was acknowledged")
	}
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, rd); ended <- err }()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the sandbox's stream was not cut off by the kill-switch")
	}
	brokertest.Eventually(t, 10*time.Second, func() bool {
		for _, rec := range brokertest.ParseAudit(t, b.AuditExport()) {
			if rec.Type == "call.completed" && rec.SessionID == s.ID && rec.Code == "killswitch_engaged" {
				return true
			}
		}
		return false
	})
	b.Do("GET", b.Sandbox+"/v1/proxy/stream/feed", s.Token, nil).WantProblem(t, 503, "killswitch_engaged")

	// Released, the same session works again.
	if r := b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	s2 := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s2.Token, nil); r.Status != 200 {
		t.Fatalf("after release: %d %s", r.Status, r.Body)
	}
}

// A call waiting at the upstream (no bytes yet) and sandboxes long-polling
// for a reviewer's decision are answered at once when the switch is engaged.
func TestKillswitchEndsWaitingCallsAndLongPolls(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	slow := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/slow"})))
	gated := brokertest.GatedSession(b, brokertest.ProcAdminToken, nil)

	results := make(chan brokertest.Response, 3)
	go func() { results <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", slow.Token, nil) }()
	<-up.Started
	// A gated call holding its connection for the decision.
	go func() {
		results <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 1}`, "Prefer", "wait=60")
	}()
	// A second gated action, long-polled through GET /v1/actions/{id}.
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", gated.Token, `{"amount": 2}`)
	if r.Status != 202 {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	a := brokertest.DecodeAction(t, r)
	go func() {
		results <- b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID, gated.Token, nil, "Prefer", "wait=60")
	}()
	brokertest.Eventually(t, 10*time.Second, func() bool {
		var n int
		for _, x := range brokertest.ParseAudit(t, b.AuditExport()) {
			if x.Type == "action.pending" {
				n++
			}
		}
		return n == 2
	})
	// Both are waiting for the decision before the switch is engaged.
	brokertest.Eventually(t, 10*time.Second, func() bool {
		return metricLine(t, b, "airlock_decision_waiters") == "airlock_decision_waiters 2"
	})

	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage: %d %s", r.Status, r.Body)
	}
	waited := 0
	for i := 0; i < 3; i++ {
		select {
		case r := <-results:
			r.WantProblem(t, 503, "killswitch_engaged")
			// Set once a call was admitted and began to wait: the refusal cut the
			// wait, it did not refuse a call that came in after the switch.
			if r.Header.Get("Preference-Applied") == "wait=60" {
				waited++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of 3 waiting calls were still waiting after the kill-switch was acknowledged", 3-i)
		}
	}
	if waited != 2 {
		t.Fatalf("%d of the 2 long-polls were cut while waiting", waited)
	}
}

// An approved action being executed is cut by the kill-switch: the upstream
// sees its request end and the action fails with killswitch_engaged.
func TestKillswitchCutsExecutingAction(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(map[string]any{"task_id": "t-exec", "isolation": "microvm", "grants": []any{
		brokertest.APIGrant(map[string]any{"method": "POST", "path": "/slow"})}})
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/slow", s.Token, `{}`)
	if r.Status != 202 {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	a := brokertest.DecodeAction(t, r)
	reviewer := b.NewToken("reviewer", "rhea")
	if r := b.Do("POST", b.Control+"/v1/approvals/"+a.ID+"/approve", reviewer, map[string]any{"comment": "ok"}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Body)
	}
	select {
	case <-up.Started:
	case <-time.After(20 * time.Second):
		t.Fatal("the approved action never reached the upstream")
	}
	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": "incident"}); r.Status != 200 {
		t.Fatalf("engage: %d %s", r.Status, r.Body)
	}
	var got struct {
		Status string `json:"status"`
		Result struct {
			Code string `json:"code"`
		} `json:"result"`
	}
	brokertest.Eventually(t, 20*time.Second, func() bool {
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals/"+a.ID, reviewer, nil).Body, &got)
		return got.Status == "failed"
	})
	if got.Result.Code != "killswitch_engaged" {
		t.Fatalf("executing action cut by the kill-switch: result code %q", got.Result.Code)
	}
}

// airlockSeries lists the Prometheus series (name and labels) that Airlock
// itself exposes.
func airlockSeries(t *testing.T, b *brokertest.Proc) []string {
	t.Helper()
	r := b.Do("GET", b.Control+"/metrics", "", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	var out []string
	for _, line := range strings.Split(string(r.Body), "\n") {
		if !strings.HasPrefix(line, "airlock_") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		out = append(out, series)
	}
	sort.Strings(out)
	return out
}

// No unauthenticated input makes state: calls to upstream names nobody
// configured, with or without a token, are counted as "unknown" and never
// add a series to /metrics.
func TestRandomUpstreamNamesDoNotGrowMetrics(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	warm := func(i int) {
		b.Do("GET", fmt.Sprintf("%s/v1/proxy/nx-%d/ok", b.Sandbox, i), "", nil)
		b.Do("GET", fmt.Sprintf("%s/v1/proxy/nx-%d/ok", b.Sandbox, i), s.Token, nil).WantProblem(t, 404, "not_found")
		b.Do("GET", fmt.Sprintf("%s/v1/aws/nx-%d/bucket/key", b.Sandbox, i), "", nil)
	}
	warm(0)
	before := airlockSeries(t, b)
	for i := 1; i <= 200; i++ {
		warm(i)
	}
	after := airlockSeries(t, b)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("random upstream names changed the series:\nbefore %d: %v\nafter %d: %v", len(before), before, len(after), after)
	}
	for _, series := range after {
		if strings.Contains(series, "nx-") {
			t.Fatalf("a name from the request became a label: %s", series)
		}
	}
	found := false
	for _, series := range after {
		found = found || strings.Contains(series, `upstream="unknown"`)
	}
	if !found {
		t.Fatal(`refused calls to unknown upstreams are not counted under upstream="unknown"`)
	}
}

// A kill that lands while the broker fetches the credential (after the call
// was authorized, before it was recorded and sent) ends the call there:
// nothing reaches the upstream, no "allowed" record is written for it, and
// the grant's use is given back.
func TestKillDuringCredentialFetchSendsNothing(t *testing.T) {
	up := brokertest.NewUpstream(t)
	fifo := filepath.Join(t.TempDir(), "secret")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: fmt.Sprintf(`  - name: slowcred
    base_url: %s
    sensitive: false
    credential: {source: file, path: %s}
    inject: {header: Authorization, format: "Bearer {secret}"}
`, up.URL, fifo)})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "slowcred", "max_uses": 5, "rules": []any{map[string]any{"method": "GET", "path": "/ok"}}}))
	res := make(chan brokertest.Response, 1)
	go func() { res <- b.Do("GET", b.Sandbox+"/v1/proxy/slowcred/ok", s.Token, nil) }()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once the broker is reading the credential
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	_, _ = io.WriteString(w, brokertest.Canary)
	_ = w.Close()
	select {
	case r := <-res:
		r.WantProblem(t, 401, "session_revoked")
	case <-time.After(20 * time.Second):
		t.Fatal("the call was not answered")
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream after the kill", n)
	}
	for _, rec := range brokertest.ParseAudit(t, b.AuditExport()) {
		if rec.Type == "call.allowed" && rec.SessionID == s.ID {
			t.Fatal("a call cut by a kill before it was sent was recorded as allowed")
		}
	}
	var g struct {
		Uses int `json:"uses"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/grants/"+s.Grants[0].ID, brokertest.ProcAdminToken, nil).Body, &g)
	if g.Uses != 0 {
		t.Fatalf("grant uses after the cut call: %d, want 0", g.Uses)
	}
}

// metricLine is the /metrics line of a series without labels ("" if absent).
func metricLine(t *testing.T, b *brokertest.Proc, name string) string {
	t.Helper()
	r := b.Do("GET", b.Control+"/metrics", "", nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if series, _, _ := strings.Cut(line, " "); series == name {
			return line
		}
	}
	return ""
}
