package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// newUserEnv is the environment of a new user in a fresh clone: PATH holds
// Go's directory, /usr/bin and /bin, nothing else (no broker); HOME and
// TMPDIR are empty directories. Go's own caches are the machine's, so that
// `go run` neither downloads modules nor rebuilds what is built.
func newUserEnv(t *testing.T) []string {
	t.Helper()
	goBin := brokertest.RequireTool(t, "go", "install Go from https://go.dev/dl/")
	env := []string{
		"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin",
		"HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir(),
		"GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=",
	}
	out, err := exec.Command(goBin, "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		if i < len(vals) {
			env = append(env, k+"="+vals[i])
		}
	}
	return env
}

// getenvIn is the value of k in env.
func getenvIn(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

// startShellProcess starts a long-running shell command in the repository's
// root, in a process group of its own (`go run` and the program it runs),
// sends it SIGINT at cleanup as Ctrl-C would, and returns its stdout, read
// up to the first line holding marker, with the rest drained.
func startShellProcess(t *testing.T, env []string, command, marker string, wait time.Duration) string {
	t.Helper()
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
	cmd := exec.Command(bash, "-c", command)
	cmd.Dir = "../.."
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &brokertest.SyncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Errorf("%s did not stop on SIGINT", command)
		}
	})
	lines := make(chan string)
	go func() {
		defer close(exited)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
	}()
	var text strings.Builder
	deadline := time.After(wait)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before printing %q:\n%s\n%s", command, marker, text.String(), stderr.Bytes())
			}
			text.WriteString(l + "\n")
			if strings.Contains(l, marker) {
				go func() {
					for range lines {
					}
				}()
				return text.String()
			}
		case <-deadline:
			t.Fatalf("%s printed no %q within %s:\n%s\n%s", command, marker, wait, text.String(), stderr.Bytes())
		}
	}
}

// TestDevQuickstart runs the README's quickstart as printed, as a new user
// would: it starts the quickstart's `go run ./cmd/broker dev` (on free ports,
// so that it runs beside other brokers), runs every other sh block of the
// README in bash, in order, in the repository's root with the PATH of a new
// user (no broker on it), and checks each "# → " line of the README against
// what came back ("…" stands for text left out).
func TestDevQuickstart(t *testing.T) {
	brokertest.RequireTool(t, "curl", "apt-get install -y curl")
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var devLine string
	var script []string
	for _, b := range codeBlocks(string(readme), "sh") {
		switch {
		case strings.Contains(b, "make test"): // the two commands of the README's top
		case strings.Contains(b, "go run ./cmd/broker dev"):
			line, _, _ := strings.Cut(strings.TrimSpace(b), " #")
			devLine = line
		default:
			script = append(script, b)
		}
	}
	if devLine == "" || len(script) < 3 {
		t.Fatalf("the README has no quickstart: dev %q, %d blocks", devLine, len(script))
	}
	env := newUserEnv(t)
	startShellProcess(t, env, devLine+" --sandbox-listen 127.0.0.1:0 --control-listen 127.0.0.1:0 --proxy-listen 127.0.0.1:0",
		"Ctrl-C stops the broker", 5*time.Minute)

	cmd := exec.Command(bash, "-c", strings.Join(script, "\n"))
	cmd.Dir = "../.."
	cmd.Env = env
	got, _ := cmd.CombinedOutput() // the refused tunnel makes curl fail; its message is checked
	out := string(got)

	if wants := checkAnswers(t, strings.Join(script, "\n"), out); wants < 8 {
		t.Errorf("the README's quickstart shows only %d answers", wants)
	}
	key, err := os.ReadFile(filepath.Join(getenvIn(env, "TMPDIR"), "airlock-dev", "demo.key"))
	if err != nil {
		t.Fatal(err)
	}
	if demoKey := strings.TrimSpace(string(key)); demoKey == "" || strings.Contains(out, demoKey) {
		t.Fatalf("the demo key reached the sandbox (or is empty): %s", out)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("a private key reached the sandbox: %s", out)
	}
}

// checkAnswers checks that out holds, in order, every answer a script's
// "# → " lines show ("…" stands for text left out), and returns how many
// it showed.
func checkAnswers(t *testing.T, script, out string) int {
	t.Helper()
	wants, at := 0, 0
	for _, line := range strings.Split(script, "\n") {
		want, ok := strings.CutPrefix(strings.TrimSpace(line), "# → ")
		if !ok {
			continue
		}
		wants++
		for _, frag := range strings.Split(want, "…") {
			if frag = strings.TrimSpace(frag); frag == "" {
				continue
			}
			i := strings.Index(out[at:], frag)
			if i < 0 {
				t.Fatalf("the doc says %q comes back; after offset %d the output has no %q:\n%s", want, at, frag, out)
			}
			at += i + len(frag)
		}
	}
	return wants
}

// TestDevPrintedQuickstart runs `broker dev` and executes the quickstart it
// prints, literally, with curl and the PATH of a new user: what a new user
// copy-pastes must work.
func TestDevPrintedQuickstart(t *testing.T) {
	brokertest.RequireTool(t, "curl", "apt-get install -y curl")
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
	env := newUserEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	logs := &brokertest.SyncBuffer{}
	go func() {
		done <- run(ctx, []string{"dev", "--sandbox-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0"}, func(string) string { return "" }, nil, pw, logs)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker dev: %v", err)
		}
	})
	var text strings.Builder
	sc := bufio.NewScanner(pr)
	deadline := time.AfterFunc(30*time.Second, func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "Ctrl-C stops the broker") {
			break
		}
	}
	deadline.Stop()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	out := text.String()

	if !strings.Contains(out, "enforce_isolation is off") {
		t.Errorf("broker dev does not say that it turns enforce_isolation off:\n%s", out)
	}
	dataDir := regexp.MustCompile(`Data lives in (\S+) and`).FindStringSubmatch(out)
	export := regexp.MustCompile(`(?m)^\s*(export AIRLOCK_SESSION=\S+)$`).FindStringSubmatch(out)
	if dataDir == nil || export == nil {
		t.Fatalf("quickstart lacks the data dir or the session export:\n%s", out)
	}
	key, err := os.ReadFile(filepath.Join(dataDir[1], "demo.key"))
	if err != nil {
		t.Fatal(err)
	}
	demoKey := strings.TrimSpace(string(key))
	shell := func(script string) string {
		cmd := exec.Command(bash, "-c", script)
		cmd.Dir = "../.."
		cmd.Env = env
		got, _ := cmd.CombinedOutput() // a refused tunnel makes curl fail; its message is checked
		if strings.Contains(string(got), demoKey) || strings.Contains(string(got), "PRIVATE KEY") {
			t.Fatalf("the demo key or a private key reached the sandbox: %s", got)
		}
		return string(got)
	}

	// The env file holds what the printed lines hold.
	if got := shell(". " + filepath.Join(dataDir[1], "env") + ` && echo "$AIRLOCK_SESSION"`); !strings.Contains(out, "export AIRLOCK_SESSION="+strings.TrimSpace(got)+"\n") {
		t.Errorf("the env file's AIRLOCK_SESSION %q is not the printed one", got)
	}

	rest, proxyPart, ok := strings.Cut(out, "Proxy mode:")
	if !ok {
		t.Fatalf("quickstart has no proxy-mode example:\n%s", out)
	}
	// Each curl command, with its continuation lines joined.
	cmds := curlCommands(rest)
	want := []string{`"message":"hello from the demo API`, `"authorization_received":"[REDACTED]"`, `"to":"acme"`, `"code":"constraint_violated"`, `"code":"no_matching_grant"`}
	if len(cmds) != len(want) {
		t.Fatalf("quickstart has %d curl commands, want %d:\n%s", len(cmds), len(want), out)
	}
	for i, c := range cmds {
		if got := shell(export[1] + "\n" + c); !strings.Contains(got, want[i]) {
			t.Errorf("%s\n  answered %s\n  want it to contain %s", c, got, want[i])
		}
	}

	// Proxy mode: the session env line and the subshells, literally.
	envLine := regexp.MustCompile(`(?m)^\s*(.*go run \./cmd/broker session env .*)$`).FindStringSubmatch(proxyPart)
	if envLine == nil {
		t.Fatalf("the proxy-mode example has no session env line:\n%s", proxyPart)
	}
	if got := shell(export[1] + "\n" + envLine[1]); strings.Contains(got, "rror") {
		t.Fatalf("%s: %s", envLine[1], got)
	}
	var proxyCmds []string
	for _, l := range strings.Split(proxyPart, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "( . ") {
			proxyCmds = append(proxyCmds, l)
		}
	}
	proxyWant := []string{`"message":"hello from the demo API`, `"authorization_received":"[REDACTED]"`, `"code":"constraint_violated"`, `403`}
	if len(proxyCmds) != len(proxyWant) {
		t.Fatalf("the proxy-mode example has %d commands, want %d:\n%s", len(proxyCmds), len(proxyWant), proxyPart)
	}
	for i, c := range proxyCmds {
		if got := shell(c); !strings.Contains(got, proxyWant[i]) {
			t.Errorf("%s\n  answered %s\n  want it to contain %s", c, got, proxyWant[i])
		}
	}
	if strings.Contains(string(logs.Bytes()), demoKey) {
		t.Fatal("the demo key reached the logs")
	}
}

// curlCommands are the curl commands of a printed example, each with its
// continuation lines joined.
func curlCommands(text string) []string {
	var cmds []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "curl ") {
			continue
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		cmds = append(cmds, l)
	}
	return cmds
}
