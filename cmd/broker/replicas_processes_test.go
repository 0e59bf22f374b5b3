package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// Three broker PROCESSES on one PostgreSQL (issue 13's test list): each
// replica is this test binary re-executed as `broker serve` (TestMain), so
// a replica can be SIGKILLed and restarted like a real deployment's.

var replicaTrials = flag.Int("replicas.trials", 3, "crash trials of TestThreeReplicasCrashTrials (each SIGKILLs one random replica of three)")

// replica is one broker process of a cluster on one database; it keeps its
// config and environment so it can be restarted after a kill.
type replica struct {
	name string
	cfg  string
	env  []string
	logs *brokertest.SyncBuffer

	mu sync.Mutex
	p  *brokertest.Child
}

// startReplicas starts n broker processes on the database dsn, all with the
// same configuration (extra appended), each with its own data_dir and a
// stable replica_id. They are stopped (SIGTERM, then waited for) at the
// test's end.
func startReplicas(t *testing.T, n int, up *brokertest.Upstream, dsn, extra string) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		dir := t.TempDir()
		r := &replica{name: string(rune('a' + i)), cfg: filepath.Join(dir, "airlock.yaml"), logs: &brokertest.SyncBuffer{},
			env: []string{"CANARY_TOKEN=" + brokertest.Canary, "AIRLOCK_PG_DSN=" + dsn}}
		err := os.WriteFile(r.cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
max_session_ttl: 1h
enforce_isolation: true
log_level: error
store: {driver: postgres, dsn: "${AIRLOCK_PG_DSN}", replica_id: replica-%s}
upstreams:
  - name: api
    base_url: %s
    timeout: 60s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
%s`, filepath.Join(dir, "data"), brokertest.ProcAdminToken, r.name, up.URL, extra)), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		r.start(t)
		t.Cleanup(func() { r.stop(t) })
		rs[i] = r
	}
	return rs
}

func (r *replica) start(t *testing.T) {
	t.Helper()
	p := brokertest.StartChildLogs(t, r.cfg, r.env, r.logs)
	r.mu.Lock()
	r.p = p
	r.mu.Unlock()
}

// kill SIGKILLs the process.
func (r *replica) kill() {
	r.mu.Lock()
	p := r.p
	r.p = nil
	r.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// stop ends the process gracefully and checks its logs hold no secret.
func (r *replica) stop(t *testing.T) {
	r.mu.Lock()
	p := r.p
	r.p = nil
	r.mu.Unlock()
	if p != nil {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		_ = p.Cmd.Wait()
	}
	brokertest.AssertNoCanary(t, "replica "+r.name+"'s logs", r.logs.Bytes())
}

// on is a client of the replica's current process for test t (nil while
// it is down).
func (r *replica) on(t *testing.T) *brokertest.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return nil
	}
	return &brokertest.Proc{T: t, Sandbox: r.p.Sandbox, Control: r.p.Control, HTTP: &http.Client{Timeout: 60 * time.Second}}
}

// acked collects the request ids of calls answered 200 to a client.
type acked struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *acked) add(r brokertest.Response) {
	if r.Status != http.StatusOK {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]bool{}
	}
	a.ids[r.Header.Get("X-Airlock-Request-Id")] = true
}

// hitsOf counts the upstream's requests whose path ends in suffix.
func hitsOf(up *brokertest.Upstream, suffix string) int {
	n := 0
	for _, r := range up.Requests() {
		if strings.HasSuffix(r.RawPath, suffix) {
			n++
		}
	}
	return n
}

// verifyExport exports the cluster's chain from p as a bundle (`broker
// audit export`), verifies it offline (`broker audit verify` with the
// installation's public key) and returns its records.
func verifyExport(t *testing.T, p *brokertest.Proc) []brokertest.AuditRecord {
	t.Helper()
	var key struct {
		PublicKey string `json:"public_key"`
	}
	_ = json.Unmarshal(p.Do("GET", p.Control+"/v1/audit/public-key", "", nil).Body, &key)
	dir := filepath.Join(t.TempDir(), "bundle")
	if out, err := cli(p, brokertest.ProcAdminToken, "", "audit", "export", "--bundle", dir); err != nil {
		t.Fatalf("audit export --bundle: %v %s", err, out)
	}
	var vout bytes.Buffer
	err := run(t.Context(), []string{"audit", "verify", dir, "--public-key", key.PublicKey}, func(string) string { return "" }, nil, &vout, &vout)
	if err != nil || !strings.Contains(vout.String(), `"ok": true`) {
		t.Fatalf("offline verify of the cluster's chain: %v\n%s", err, vout.String())
	}
	records := mustRead(t, filepath.Join(dir, "records.jsonl"))
	brokertest.AssertNoCanary(t, "audit bundle", records)
	return brokertest.ParseAudit(t, records)
}

// checkAcked fails t for every acknowledged call without its call.allowed
// record in recs, and returns the number of call.allowed records.
func checkAcked(t *testing.T, recs []brokertest.AuditRecord, ack *acked) int {
	t.Helper()
	allowed := map[string]bool{}
	n := 0
	for _, r := range recs {
		if r.Type == "call.allowed" {
			allowed[r.RequestID] = true
			n++
		}
	}
	ack.mu.Lock()
	defer ack.mu.Unlock()
	missing := 0
	for id := range ack.ids {
		if !allowed[id] {
			missing++
		}
	}
	if missing > 0 || len(ack.ids) == 0 {
		t.Errorf("%d of %d calls acknowledged to a client have no call.allowed record in the exported chain", missing, len(ack.ids))
	}
	return n
}

// TestThreeReplicas: three broker processes on one database.
//
//   - kill: a session killed on A cuts B's in-flight call (session_revoked)
//     and B and C refuse its next calls; again with every replica's LISTEN
//     connection terminated just before the kill (the catch-up read);
//     nothing reaches the upstream after the kill's acknowledgement;
//   - limits: max_uses 50 under 3×16 concurrent callers gives exactly 50
//     upstream hits and 50 call.allowed records;
//   - approvals: a gated call waiting on B, approved on A and C at once:
//     one 200, one 409, one upstream request, B answers with it;
//   - chain: the exported chain verifies offline and holds every call
//     acknowledged to a client; the upstream saw exactly as many requests
//     as there are call.allowed records.
func TestThreeReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	rs := startReplicas(t, 3, up, dsn, "")
	var ack acked

	t.Run("kill", func(t *testing.T) {
		a, b, c := rs[0].on(t), rs[1].on(t), rs[2].on(t)
		grant := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}, map[string]any{"method": "GET", "path": "/slow"})
		for _, cut := range []bool{false, true} {
			s := a.Session(brokertest.TrustedSession(grant))
			for _, p := range []*brokertest.Proc{b, c} { // both serve it from memory
				r := p.Do("GET", p.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
				if r.Status != 200 {
					t.Fatalf("call before the kill: %d %s", r.Status, r.Body)
				}
				ack.add(r)
			}
			inflight := make(chan brokertest.Response, 1)
			go func() { inflight <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
			<-up.Started
			if cut {
				conn := pgConn(t, dsn)
				// Every replica's listener is up (a replica connects it
				// after it starts serving), then all are terminated.
				awaitListeners(t, conn, 3)
				if n := cutListeners(t, conn); n != 3 {
					t.Fatalf("cut %d listener connections, want one per replica (3)", n)
				}
			}
			if r := a.Do("DELETE", a.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
				t.Fatalf("kill on A: %d %s", r.Status, r.Body)
			}
			hits := len(up.Requests())
			select {
			case r := <-inflight:
				r.WantProblem(t, 401, "session_revoked")
			case <-time.After(20 * time.Second): // the upstream holds it 30 s: only the kill ends it sooner
				t.Fatalf("B's in-flight call was not cut by the kill on A (listeners cut: %v)", cut)
			}
			for _, p := range []*brokertest.Proc{b, c} {
				brokertest.Eventually(t, 5*time.Second, func() bool { // DESIGN §9: within 1 s, stale past 2 s fails closed
					return p.Do("GET", p.Sandbox+"/v1/proxy/api/ok", s.Token, nil).Status == 401
				})
				p.Do("GET", p.Sandbox+"/v1/proxy/api/ok", s.Token, nil).WantProblem(t, 401, "session_revoked")
			}
			if got := len(up.Requests()); got != hits {
				t.Errorf("the upstream saw %d requests of the killed session after the kill (listeners cut: %v)", got-hits, cut)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		ps := []*brokertest.Proc{rs[0].on(t), rs[1].on(t), rs[2].on(t)}
		g := brokertest.APIGrant(map[string]any{"method": "GET", "path": "/lim"})
		g["max_uses"] = 50
		s := ps[0].Session(brokertest.TrustedSession(g))
		var mu sync.Mutex
		got := map[string]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, p := range ps {
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range 2 {
						r := p.Do("GET", p.Sandbox+"/v1/proxy/api/lim", s.Token, nil)
						ack.add(r)
						key := strconv.Itoa(r.Status)
						if r.Status != 200 {
							var pb struct{ Code string }
							_ = json.Unmarshal(r.Body, &pb)
							key += " " + pb.Code
						}
						mu.Lock()
						got[key]++
						mu.Unlock()
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		if want := map[string]int{"200": 50, "403 grant_exhausted": 46}; !reflect.DeepEqual(got, want) {
			t.Errorf("96 calls from 3×16 callers on max_uses 50: %v, want %v", got, want)
		}
		if n := hitsOf(up, "/lim"); n != 50 {
			t.Errorf("the upstream saw %d calls on max_uses 50, want 50", n)
		}
		allowed := 0
		for _, r := range brokertest.ParseAudit(t, ps[2].AuditExport()) {
			if r.Type == "call.allowed" && r.SessionID == s.ID {
				allowed++
			}
		}
		if allowed != 50 {
			t.Errorf("%d call.allowed records on max_uses 50, want 50", allowed)
		}
	})

	t.Run("approvals", func(t *testing.T) {
		a, b, c := rs[0].on(t), rs[1].on(t), rs[2].on(t)
		op := a.NewToken("operator", "orchestrator")
		alice := a.NewToken("reviewer", "alice")
		bob := a.NewToken("reviewer", "bob")
		s := brokertest.GatedSession(a, op, nil)
		base := hitsOf(up, "/payments")
		res := make(chan brokertest.Response, 1)
		go func() {
			res <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 42}`, "Prefer", "wait=30")
		}()
		id := a.PendingAction(t, alice)
		approveAtOnce(t, id, reviewerOn{a, alice}, reviewerOn{c, bob})
		select {
		case r := <-res:
			if r.Status != 200 || !strings.Contains(string(r.Body), "acme") {
				t.Fatalf("the sandbox waiting on B: %d %s", r.Status, r.Body)
			}
			ack.add(r)
		case <-time.After(30 * time.Second):
			t.Fatal("the sandbox waiting on B was not answered")
		}
		if n := hitsOf(up, "/payments") - base; n != 1 {
			t.Errorf("the upstream saw the approved request %d times, want 1", n)
		}
	})

	t.Run("chain", func(t *testing.T) {
		recs := verifyExport(t, rs[2].on(t))
		allowed := checkAcked(t, recs, &ack)
		if n := len(up.Requests()); n != allowed {
			t.Errorf("the upstream saw %d requests, the chain holds %d call.allowed records", n, allowed)
		}
		// The sequencing lag each replica saw (a figure, not a bound).
		for _, r := range rs {
			p := r.on(t)
			m := map[string]float64{}
			for _, line := range strings.Split(string(p.Do("GET", p.Control+"/metrics", "", nil).Body), "\n") {
				if k, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(k, "airlock_audit_append_seconds_") {
					m[k], _ = strconv.ParseFloat(v, 64)
				}
			}
			if n := m["airlock_audit_append_seconds_count"]; n > 0 {
				t.Logf("replica %s: %v records, mean sequencing lag %.2f ms", r.name, n, 1000*m["airlock_audit_append_seconds_sum"]/n)
			}
		}
	})
}

// TestThreeReplicasCrashTrials: calls run on all three replicas (ungated
// calls, calls on a max_uses and a budget grant, gated actions created and
// approved on random replicas) while a random replica is SIGKILLed and
// restarted, -replicas.trials times. Then: the chain verifies offline, no
// call acknowledged to a client is missing from it, no max_uses or budget
// grant reached the upstream beyond its limit, and no approved action
// reached the upstream twice.
func TestThreeReplicasCrashTrials(t *testing.T) {
	dsn := pgtest.DSN(t)
	up := brokertest.NewUpstream(t)
	rs := startReplicas(t, 3, up, dsn, "approval: {execution_lease: 2s}\n")
	seed := uint64(time.Now().UnixNano())
	t.Logf("replica crash trials: seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))

	a := rs[0].on(t)
	op := a.NewToken("operator", "orchestrator")
	alice := a.NewToken("reviewer", "alice")
	plain := a.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	gated := brokertest.GatedSession(a, op, nil)
	lim := crashLimited{lim: "/lim/3", spend: "/spend/3"}
	lim.token = a.Session(map[string]any{"task_id": "crash-limits", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
		"grants": []any{
			map[string]any{"upstream": "api", "max_uses": crashMaxUses, "rules": []any{map[string]any{"method": "GET", "path": lim.lim}}},
			map[string]any{"upstream": "api", "budget": map[string]any{"body.amount": crashBudget},
				"rules": []any{map[string]any{"method": "POST", "path": lim.spend, "irreversible": false}}},
		}}).Token

	var (
		ack       acked
		succeeded atomic.Int64
		amount    atomic.Int64 // each gated action pays a distinct amount (1..100)
		amu       sync.Mutex
		approved  []string
		wg        sync.WaitGroup
		stop      = make(chan struct{})
	)
	client := &http.Client{Timeout: 10 * time.Second}
	// call makes one request on a random live replica; nil when it failed
	// (the replica died under it, or was down).
	call := func(method, path, token, body string, ctrl bool) *brokertest.Response {
		p := rs[rand.IntN(len(rs))].on(t)
		if p == nil {
			return nil
		}
		base := p.Sandbox + "/v1/proxy/api"
		if ctrl {
			base = p.Control
		}
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil
		}
		return &brokertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() {
				var r *brokertest.Response
				switch rand.IntN(3) {
				case 0:
					r = call("GET", "/ok", plain.Token, "", false)
				case 1:
					r = call("GET", lim.lim, lim.token, "", false)
				case 2:
					r = call("POST", lim.spend, lim.token, fmt.Sprintf(`{"amount": %d}`, 1+rand.IntN(3)), false)
				}
				if r != nil && r.Status == 200 {
					ack.add(*r)
					succeeded.Add(1)
				}
			}
		}()
	}
	// Gated actions: held on one random replica, approved on another.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() && amount.Load() < 100 {
			n := amount.Add(1)
			r := call("POST", "/payments", gated.Token, fmt.Sprintf(`{"amount": %d}`, n), false)
			if r == nil || r.Status != http.StatusAccepted {
				continue
			}
			var v brokertest.ActionView
			if json.Unmarshal(r.Body, &v) != nil || v.ID == "" {
				continue
			}
			for !stopped() {
				d := call("POST", "/v1/approvals/"+v.ID+"/approve", alice, "{}", true)
				if d != nil && d.Status == 200 {
					amu.Lock()
					approved = append(approved, v.ID)
					amu.Unlock()
					break
				}
				if d != nil && d.Status != http.StatusServiceUnavailable && d.Status/100 != 5 {
					break // decided already (its approval's answer was lost with a killed replica)
				}
			}
		}
	}()

	for trial := 0; trial < *replicaTrials; trial++ {
		from := succeeded.Load()
		brokertest.Eventually(t, 30*time.Second, func() bool { return succeeded.Load() >= from+20 })
		<-time.After(time.Duration(rng.IntN(200)) * time.Millisecond) // a random moment of the load
		victim := rs[rng.IntN(len(rs))]
		victim.kill()
		victim.start(t)
		t.Logf("trial %d: replica %s SIGKILLed and restarted", trial, victim.name)
	}
	from := succeeded.Load()
	brokertest.Eventually(t, 30*time.Second, func() bool { return succeeded.Load() >= from+20 }) // every replica serves again
	close(stop)
	wg.Wait()

	p := rs[2].on(t)
	// Executions the kills interrupted end failed after their lease; none is
	// left executing or approved.
	for _, id := range approved {
		brokertest.Eventually(t, 20*time.Second, func() bool {
			st := brokertest.DecodeAction(t, p.Do("GET", p.Control+"/v1/approvals/"+id, alice, nil)).Status
			return st != "executing" && st != "approved"
		})
	}
	paid := map[string]int{}
	for _, r := range up.Requests() {
		if strings.HasSuffix(r.RawPath, "/payments") {
			paid[string(r.Body)]++
		}
	}
	for body, n := range paid {
		if n > 1 {
			t.Errorf("an approved action reached the upstream %d times: %s", n, body)
		}
	}
	crashCheckLimits(t, p, up, []crashLimited{lim})
	recs := verifyExport(t, p)
	checkAcked(t, recs, &ack)
	t.Logf("replica crash trials: %d SIGKILLs, %d calls acknowledged, all in the chain of %d records; %d actions approved, %d reached the upstream, none twice",
		*replicaTrials, len(ack.ids), len(recs), len(approved), len(paid))
}
