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
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestDevQuickstart runs `broker dev` and executes the quickstart it prints,
// literally, with curl: what a new user copy-pastes must work.
func TestDevQuickstart(t *testing.T) {
	brokertest.RequireTool(t, "curl", "apt-get install -y curl")
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
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

	dataDir := regexp.MustCompile(`Data lives in (\S+) and`).FindStringSubmatch(out)
	export := regexp.MustCompile(`(?m)^\s*(export AIRLOCK_SESSION=\S+)$`).FindStringSubmatch(out)
	if dataDir == nil || export == nil {
		t.Fatalf("quickstart lacks the data dir or the session export:\n%s", out)
	}
	key, err := os.ReadFile(filepath.Join(strings.TrimSuffix(dataDir[1], "."), "demo.key"))
	if err != nil {
		t.Fatal(err)
	}
	demoKey := strings.TrimSpace(string(key))

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
		got, err := exec.Command(bash, "-c", export[1]+"\n"+c).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, got)
		}
		if !strings.Contains(string(got), want[i]) {
			t.Errorf("%s\n  answered %s\n  want it to contain %s", c, got, want[i])
		}
		if strings.Contains(string(got), demoKey) {
			t.Fatalf("the demo key reached the sandbox: %s", got)
		}
	}

	// Proxy mode: the eval line (its `broker` is this test binary) and
	// plain curl commands, literally, by the demo API's name.
	evalLine := regexp.MustCompile(`(?m)^\s*(eval "\$\(.*broker session env .*\)")$`).FindStringSubmatch(proxyPart)
	if evalLine == nil {
		t.Fatalf("the proxy-mode example has no eval line:\n%s", proxyPart)
	}
	shim := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shim, "broker"), []byte("#!/bin/sh\nAIRLOCK_TEST_CLI=1 exec '"+self+"' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	proxyCmds := curlCommands(proxyPart)
	proxyWant := []string{`"message":"hello from the demo API`, `"authorization_received":"[REDACTED]"`, `"code":"constraint_violated"`, `403`}
	if len(proxyCmds) != len(proxyWant) {
		t.Fatalf("the proxy-mode example has %d curl commands, want %d:\n%s", len(proxyCmds), len(proxyWant), proxyPart)
	}
	for i, c := range proxyCmds {
		cmd := exec.Command(bash, "-c", export[1]+"\n"+evalLine[1]+"\n"+c)
		cmd.Env = append(os.Environ(), "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())
		got, _ := cmd.CombinedOutput() // the refused tunnel makes curl fail; its message is checked
		if !strings.Contains(string(got), proxyWant[i]) {
			t.Errorf("%s\n  answered %s\n  want it to contain %s", c, got, proxyWant[i])
		}
		if strings.Contains(string(got), demoKey) || strings.Contains(string(got), "PRIVATE KEY") {
			t.Fatalf("the demo key or a private key reached the sandbox: %s", got)
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
