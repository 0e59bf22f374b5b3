package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

var crashTrials = flag.Int("crash.trials", 3, "crash trials to run (make crash runs 100)")

func checkBolt(t *testing.T, path string) {
	t.Helper()
	if err := boltstore.CheckFile(path); err != nil {
		t.Fatalf("bbolt consistency check after crash: %v", err)
	}
}

// Limits of the grants the crash trials spend (one pair per trial).
const (
	crashMaxUses = 50
	crashBudget  = 100
)

// crashLimited is a session with a max_uses grant (GET /lim/N) and a budget
// grant (POST /spend/N, amounts 1 to 3), not gated.
type crashLimited struct {
	token      string
	lim, spend string
}

// TestCrashTrials runs concurrent sandbox calls against a real broker
// process, kills it with SIGKILL at a random moment, restarts it, and checks
// that every call the client saw succeed has its durable record, that the
// chain verifies, that the bbolt file is consistent, and that across all
// kills no max_uses grant reached the upstream more than max_uses times and
// no budget grant spent more than its budget there. Trials alternate the
// audit durability modes (fsync, buffered).
func TestCrashTrials(t *testing.T) {
	up := brokertest.NewUpstream(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "airlock.yaml")
	writeCfg := func(durability string) {
		t.Helper()
		err := os.WriteFile(cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
enforce_isolation: false
log_level: error
audit: {durability: %s, checkpoint_every: 50}
upstreams:
  - name: api
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
`, dataDir, brokertest.ProcAdminToken, durability, up.URL)), 0o600)
		if err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"CANARY_TOKEN=" + brokertest.Canary}
	client := &http.Client{Timeout: 5 * time.Second}
	var token string
	var limited []crashLimited
	succeeded := map[string]bool{}
	seed := uint64(time.Now().UnixNano())
	t.Logf("crash trials: seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for trial := 0; trial < *crashTrials; trial++ {
		writeCfg([]string{store.DurabilityFsync, store.DurabilityBuffered}[trial%2])
		p := brokertest.StartChild(t, cfg, env)
		b := &brokertest.Proc{T: t, Control: p.Control, HTTP: client}
		if token == "" {
			s := b.Session(map[string]any{"task_id": "crash", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
				"grants": []any{brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})}})
			token = s.Token
		}
		lim, spend := fmt.Sprintf("/lim/%d", trial), fmt.Sprintf("/spend/%d", trial)
		ls := b.Session(map[string]any{"task_id": "crash-limits", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
			"grants": []any{
				map[string]any{"upstream": "api", "max_uses": crashMaxUses, "rules": []any{map[string]any{"method": "GET", "path": lim}}},
				map[string]any{"upstream": "api", "budget": map[string]any{"body.amount": crashBudget},
					"rules": []any{map[string]any{"method": "POST", "path": spend, "irreversible": false}}},
			}})
		limited = append(limited, crashLimited{token: ls.Token, lim: lim, spend: spend})
		targets := append([]crashLimited(nil), limited...)
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			stop = make(chan struct{})
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest("GET", p.Sandbox+"/v1/proxy/api/ok", nil)
					req.Header.Set("Authorization", "Bearer "+token)
					// Two calls in three spend a limited grant, this trial's
					// most often, earlier ones (exhausted before a kill) too.
					tg := targets[len(targets)-1]
					if len(targets) > 1 && rand.IntN(4) == 0 {
						tg = targets[rand.IntN(len(targets)-1)]
					}
					switch rand.IntN(3) {
					case 1:
						req, _ = http.NewRequest("GET", p.Sandbox+"/v1/proxy/api"+tg.lim, nil)
						req.Header.Set("Authorization", "Bearer "+tg.token)
					case 2:
						req, _ = http.NewRequest("POST", p.Sandbox+"/v1/proxy/api"+tg.spend, strings.NewReader(fmt.Sprintf(`{"amount": %d}`, 1+rand.IntN(3))))
						req.Header.Set("Authorization", "Bearer "+tg.token)
						req.Header.Set("Content-Type", "application/json")
					}
					resp, err := client.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						mu.Lock()
						succeeded[resp.Header.Get("X-Airlock-Request-Id")] = true
						mu.Unlock()
					}
				}
			}()
		}
		<-time.After(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		p.Kill()
		close(stop)
		wg.Wait()
		checkBolt(t, filepath.Join(dataDir, "airlock.db"))
	}

	p := brokertest.StartChild(t, cfg, env)
	defer func() { _ = p.Cmd.Process.Signal(os.Interrupt); _ = p.Cmd.Wait() }()
	b := &brokertest.Proc{T: t, Sandbox: p.Sandbox, Control: p.Control, HTTP: client}
	crashCheckLimits(t, b, up, limited)
	var rep struct {
		OK      bool   `json:"ok"`
		Records uint64 `json:"records"`
		Reason  string `json:"reason"`
	}
	_ = json.Unmarshal(b.Do("GET", p.Control+"/v1/audit/verify", brokertest.ProcAdminToken, nil).Body, &rep)
	if !rep.OK {
		t.Fatalf("the chain does not verify after %d crashes: %s", *crashTrials, rep.Reason)
	}
	allowed := map[string]bool{}
	for _, r := range brokertest.ParseAudit(t, b.AuditExport()) {
		if r.Type == "call.allowed" {
			allowed[r.RequestID] = true
		}
	}
	missing := 0
	for id := range succeeded {
		if !allowed[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d calls the client saw succeed have no durable record", missing, len(succeeded))
	}
	if len(succeeded) == 0 {
		t.Fatal("no call succeeded: the trials tested nothing")
	}
	t.Logf("crash trials: %d SIGKILLs, %d calls succeeded, all with their durable record; chain of %d records verifies; bbolt consistent after every kill",
		*crashTrials, len(succeeded), rep.Records)
}

// crashCheckLimits spends what the limited grants have left after the
// last restart, then checks what the upstream received in all: never more
// than max_uses calls or the budget per grant, whatever the kills
// interrupted. (Fewer is possible: a call whose record was written when the
// broker was killed counts as used though it was never sent.)
func crashCheckLimits(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, limited []crashLimited) {
	t.Helper()
	for _, l := range limited {
		for i := 0; i <= crashMaxUses; i++ {
			if r := b.Do("GET", b.Sandbox+"/v1/proxy/api"+l.lim, l.token, nil); r.Status != 200 {
				r.WantProblem(t, http.StatusForbidden, "grant_exhausted")
				break
			}
		}
		for i := 0; i <= crashBudget; i++ {
			if r := b.Do("POST", b.Sandbox+"/v1/proxy/api"+l.spend, l.token, `{"amount": 1}`); r.Status != 200 {
				r.WantProblem(t, http.StatusForbidden, "budget_exceeded")
				break
			}
		}
	}
	uses, spent := map[string]int{}, map[string]float64{}
	for _, r := range up.Requests() {
		uses[r.RawPath]++
		if strings.HasPrefix(r.RawPath, "/spend/") {
			var body struct{ Amount float64 }
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatalf("a spend the upstream received: %q", r.Body)
			}
			spent[r.RawPath] += body.Amount
		}
	}
	for _, l := range limited {
		if uses[l.lim] > crashMaxUses {
			t.Errorf("%s: the upstream received %d calls across the kills, more than max_uses (%d)", l.lim, uses[l.lim], crashMaxUses)
		}
		if spent[l.spend] > crashBudget {
			t.Errorf("%s: the upstream received amounts summing to %v across the kills, more than the budget (%d)", l.spend, spent[l.spend], crashBudget)
		}
		t.Logf("%s: %d of %d uses reached the upstream; %s: %v of %d spent", l.lim, uses[l.lim], crashMaxUses, l.spend, spent[l.spend], crashBudget)
	}
}
