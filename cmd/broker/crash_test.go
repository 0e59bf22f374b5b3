package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/store"
)

var crashTrials = flag.Int("crash.trials", 3, "crash trials to run (make crash runs 100)")

// proc is a broker running as its own process (this test binary, re-executed).
type proc struct {
	cmd              *exec.Cmd
	sandbox, control string
}

func startProc(t *testing.T, cfg string, env []string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "AIRLOCK_TEST_SERVE="+cfg), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("broker process did not start: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	p := &proc{cmd: cmd}
	if _, err := fmt.Sscanf(line, "airlock: sandbox plane %s control plane %s", &p.sandbox, &p.control); err != nil {
		t.Fatalf("start line %q", line)
	}
	p.sandbox = strings.TrimSuffix(p.sandbox, ",")
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

func checkBolt(t *testing.T, path string) {
	t.Helper()
	if err := store.CheckFile(path); err != nil {
		t.Fatalf("bbolt consistency check after crash: %v", err)
	}
}

// TestCrashTrials runs concurrent sandbox calls against a real broker
// process, kills it with SIGKILL at a random moment, restarts it, and checks
// that every call the client saw succeed has its durable record, that the
// chain verifies and that the bbolt file is consistent.
func TestCrashTrials(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "airlock.yaml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
enforce_isolation: false
log_level: error
audit: {durability: fsync, checkpoint_every: 50}
upstreams:
  - name: api
    base_url: %s
    credential: {source: env, name: CANARY_TOKEN}
`, dataDir, adminToken, up.URL)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"CANARY_TOKEN=" + canary}
	client := &http.Client{Timeout: 5 * time.Second}
	var token string
	succeeded := map[string]bool{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for trial := 0; trial < *crashTrials; trial++ {
		p := startProc(t, cfg, env)
		if token == "" {
			b := &brokerProc{t: t, control: p.control, http: client}
			s := b.session(map[string]any{"task_id": "crash", "ttl": "1h", "untrusted_input": false, "isolation": "microvm",
				"grants": []any{apiGrant(map[string]any{"method": "GET", "path": "/ok"})}})
			token = s.Token
		}
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
					req, _ := http.NewRequest("GET", p.sandbox+"/v1/proxy/api/ok", nil)
					req.Header.Set("Authorization", "Bearer "+token)
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
		p.kill()
		close(stop)
		wg.Wait()
		checkBolt(t, filepath.Join(dataDir, "airlock.db"))
	}

	p := startProc(t, cfg, env)
	defer func() { _ = p.cmd.Process.Signal(os.Interrupt); _ = p.cmd.Wait() }()
	b := &brokerProc{t: t, control: p.control, http: client}
	var rep struct {
		OK      bool   `json:"ok"`
		Records uint64 `json:"records"`
		Reason  string `json:"reason"`
	}
	_ = json.Unmarshal(b.do("GET", p.control+"/v1/audit/verify", adminToken, nil).body, &rep)
	if !rep.OK {
		t.Fatalf("the chain does not verify after %d crashes: %s", *crashTrials, rep.Reason)
	}
	allowed := map[string]bool{}
	for _, r := range parseAudit(t, b.auditExport()) {
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
