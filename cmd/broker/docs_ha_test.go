package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestHADocWalkThrough runs docs/ha.md's walk-through as printed: three
// replicas on one PostgreSQL (the package's server, a fresh database), a
// session created on the first, killed on the second, refused on the third.
// The database's DSN carries the run-time parameters of the page's DSN
// example (all but sslmode: the test's server has no TLS), so the example
// is one pgx and the server accept.
func TestHADocWalkThrough(t *testing.T) {
	brokertest.RequireTool(t, "curl", "apt-get install -y curl")
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
	doc, err := os.ReadFile("../../docs/ha.md")
	if err != nil {
		t.Fatal(err)
	}
	var script string
	for _, b := range codeBlocks(string(doc), "sh") {
		if strings.Contains(b, "AIRLOCK_PG_DSN") && strings.Contains(b, "session kill") {
			script = b
		}
	}
	if script == "" {
		t.Fatal("docs/ha.md has no walk-through block")
	}
	example := regexp.MustCompile(`postgres://\S+`).FindString(string(doc))
	u, err := url.Parse(example)
	if example == "" || err != nil || u.RawQuery == "" {
		t.Fatalf("docs/ha.md has no DSN example with parameters: %q %v", example, err)
	}
	dsn := pgtest.DSN(t)
	var keys []string
	for k := range u.Query() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "sslmode" {
			dsn += " " + k + "=" + u.Query().Get(k)
		}
	}

	env := append(newUserEnv(t), "AIRLOCK_PG_DSN="+dsn, "PORT="+strconv.Itoa(freePortBase(t)))
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = "../.."
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &brokertest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the walk-through exited with %v", err)
		}
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the replicas too: the script's trap cannot run
		<-done
		t.Fatalf("the walk-through did not end in 5 minutes:\n%s", out.Bytes())
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a replica the trap missed
	if wants := checkAnswers(t, script, string(out.Bytes())); wants < 3 {
		t.Errorf("the walk-through shows only %d answers", wants)
	}
}

// freePortBase is a port P such that the walk-through's ports (P+10, P+11,
// P+20, P+21, P+30, P+31) are free now.
func freePortBase(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := 20000 + 10*rand.IntN(3000)
		free := true
		for _, off := range []int{10, 11, 20, 21, 30, 31} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+off))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return p
		}
	}
	t.Fatal("no free ports for the walk-through")
	return 0
}
