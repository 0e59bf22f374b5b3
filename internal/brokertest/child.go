package brokertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// Child is a broker running as its own process: the test binary
// re-executed as `broker serve`, so that a test can SIGKILL it (crash
// trials, replicas). The test binary's TestMain must call ServeChild first.
type Child struct {
	Cmd              *exec.Cmd
	Sandbox, Control string
}

// StartChild starts a Child serving the config file cfg, with env added to
// this process's environment, its logs discarded; it returns once the
// broker printed its listening addresses. The caller ends it (Kill, or
// SIGTERM on Cmd and wait).
func StartChild(t *testing.T, cfg string, env []string) *Child {
	t.Helper()
	return StartChildLogs(t, cfg, env, io.Discard)
}

// StartChildLogs is StartChild with the process's stderr (its logs) to logs.
func StartChildLogs(t *testing.T, cfg string, env []string, logs io.Writer) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childConfig+"="+cfg), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("broker process did not start: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	p := &Child{Cmd: cmd}
	if _, err := fmt.Sscanf(line, "airlock: sandbox plane %s control plane %s", &p.Sandbox, &p.Control); err != nil {
		t.Fatalf("start line %q", line)
	}
	p.Sandbox = strings.TrimSuffix(p.Sandbox, ",")
	return p
}

// Kill SIGKILLs the process and waits for it.
func (p *Child) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	_ = p.Cmd.Wait()
}

// childConfig is the variable through which StartChild tells the
// re-executed test binary which config to serve.
const childConfig = "AIRLOCK_TEST_SERVE"

// ServeChild makes this test binary a Child when StartChild started it:
// it serves the config as `broker serve` through run until SIGTERM or
// SIGINT and reports child true with the process's exit code (1 on an
// error), for TestMain to exit with. Otherwise child is false, at once.
// Call it first in TestMain.
func ServeChild(run RunFunc) (code int, child bool) {
	cfg := os.Getenv(childConfig)
	if cfg == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, []string{"serve", "--config", cfg}, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		return 1, true
	}
	return 0, true
}
