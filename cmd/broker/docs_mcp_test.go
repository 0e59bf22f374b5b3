package main

import (
	"bufio"
	"bytes"
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

	"github.com/chromedp/chromedp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// TestMCPDocWalkThrough runs docs/mcp.md's walk-through as printed, as a
// new user would: its `go run ./cmd/broker dev` (on free ports), then its
// script in bash with a new user's PATH (Go's directory, /usr/bin, /bin),
// in the repository's root. The script's stock MCP client
// (examples/mcp/client.mjs, on the official TypeScript SDK) sees the pin
// refused and the gate hold create_issue; real headless Chromium then logs
// in to the reviewers' page with the reviewer token the script printed and
// approves the action the script names, while the script waits for it
// (`broker approvals wait`); the retry gets the result and the audit export
// shows the records. Every "# → " line is checked against what came back,
// and the demo key must not be in it.
func TestMCPDocWalkThrough(t *testing.T) {
	bash := brokertest.RequireTool(t, "bash", "apt-get install -y bash")
	brokertest.RequireTool(t, "node", "apt-get install -y nodejs")
	brokertest.RequireTool(t, "npm", "apt-get install -y npm")
	doc, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	var devLine, script string
	for _, b := range codeBlocks(string(doc), "sh") {
		switch {
		case strings.Contains(b, "examples/mcp/client.mjs"):
			script = b
		case strings.Contains(b, "go run ./cmd/broker dev"):
			devLine, _, _ = strings.Cut(strings.TrimSpace(b), " #")
		}
	}
	if devLine == "" || script == "" {
		t.Fatalf("docs/mcp.md has no walk-through: dev %q, script %d bytes", devLine, len(script))
	}
	env := newUserEnv(t)
	startShellProcess(t, env, devLine+" --sandbox-listen 127.0.0.1:0 --control-listen 127.0.0.1:0 --proxy-listen 127.0.0.1:0",
		"Ctrl-C stops the broker", 5*time.Minute)

	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = "../.."
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	reviewerRE := regexp.MustCompile(`^reviewer token: (alk_\S+)$`)
	approveRE := regexp.MustCompile(`^approve (act_[0-9a-z]+) at (http://127\.0\.0\.1:\d+)/ui/actions/act_[0-9a-z]+$`)
	var out strings.Builder
	var reviewer string
	approved := false
	deadline := time.After(8 * time.Minute)
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break read
			}
			out.WriteString(l + "\n")
			if m := reviewerRE.FindStringSubmatch(l); m != nil {
				reviewer = m[1]
			}
			if m := approveRE.FindStringSubmatch(l); m != nil {
				if reviewer == "" {
					t.Fatalf("the script asks for an approval before printing a reviewer token:\n%s", out.String())
				}
				approveInPage(t, m[2], reviewer, m[1])
				approved = true
			}
		case <-deadline:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the walk-through did not end in 8 minutes:\n%s", out.String())
		}
	}
	if err := <-done; err != nil {
		t.Errorf("the walk-through exited with %v", err)
	}
	text := out.String()
	if !approved {
		t.Fatalf("the walk-through never named an action to approve:\n%s", text)
	}
	if wants := checkAnswers(t, script, text); wants < 12 {
		t.Errorf("the walk-through shows only %d answers", wants)
	}
	key, err := os.ReadFile(filepath.Join(getenvIn(env, "TMPDIR"), "airlock-dev", "demo.key"))
	if err != nil {
		t.Fatal(err)
	}
	if demoKey := strings.TrimSpace(string(key)); demoKey == "" || strings.Contains(text, demoKey) {
		t.Fatalf("the demo key reached the walk-through's output (or is empty):\n%s", text)
	}
}

// approveInPage logs in to the reviewers' page at control with token and
// approves action id there, as a reviewer would with a browser.
func approveInPage(t *testing.T, control, token, id string) {
	t.Helper()
	ctx := browser(t)
	var request, notice string
	err := chromedp.Do(ctx,
		chromedp.Navigate(control+"/ui"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS("nav")),
		chromedp.Navigate(control+"/ui/actions/"+id),
		chromedp.WaitVisible(chromedp.ID("request")),
		textInto(chromedp.ID("request"), &request),
	)
	if err != nil {
		t.Fatalf("open action %s in the page: %v", id, err)
	}
	if !strings.Contains(request, "create_issue") || !strings.Contains(request, "acme/web") {
		t.Errorf("the page does not show the held tool call: %q", request)
	}
	screenshot(t, ctx, "ui-mcp-action")
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("comment"), "docs/mcp.md walk-through"),
		chromedp.Click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
		textInto(chromedp.CSS(".notice"), &notice),
	)
	if err != nil {
		t.Fatalf("approve %s in the page: %v", id, err)
	}
	t.Logf("the page says: %s", notice)
}

// A gated tools/call executed after its approval is recorded as a live
// allowed call is: its mcp.call.allowed record carries the constrained
// arguments' values (the pin filled in, the label, the title), and the
// identical retry gets the result without a second upstream call.
func TestMCPGatedCallAuditsConstrainedValues(t *testing.T) {
	b, up := startMCPBroker(t, "approval: {mcp_wait: 0s}\n")
	s, rev := gatedSession(t, b, "t-mcp-gate")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	ctx := context.Background()
	args := map[string]any{"title": "crash", "labels": []any{"bug"}}

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
	if err != nil || !res.IsError {
		t.Fatalf("held call: %v %+v", err, res)
	}
	id := regexp.MustCompile(`act_[0-9a-z]+`).FindString(res.Content[0].(*sdk.TextContent).Text)
	if id == "" {
		t.Fatalf("the pending result names no action: %+v", res.Content[0])
	}
	if a := b.Do("POST", b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{"comment": "ok"}); a.Status != 200 {
		t.Fatalf("approve: %d %s", a.Status, a.Body)
	}
	var text string
	brokertest.Eventually(t, 10*time.Second, func() bool {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: args})
		if err != nil || res.IsError {
			return false
		}
		text = res.Content[0].(*sdk.TextContent).Text
		return true
	})
	if text != "created in acme/web: crash" || up.calls.Load() != 1 {
		t.Fatalf("retry after approval: %q, %d upstream calls (want the result of exactly one)", text, up.calls.Load())
	}
	var allowed []byte
	for _, line := range bytes.Split(b.AuditExport(), []byte("\n")) {
		if bytes.Contains(line, []byte(`"type":"mcp.call.allowed"`)) && bytes.Contains(line, []byte(`"action_id":"`+id+`"`)) {
			allowed = line
		}
	}
	if allowed == nil {
		t.Fatalf("no mcp.call.allowed record for action %s", id)
	}
	want := `"constrained":{"args.labels.*":"[\"bug\"]","args.repo":"\"acme/web\"","args.title":"\"crash\""}`
	if !bytes.Contains(allowed, []byte(want)) {
		t.Errorf("the executed action's mcp.call.allowed record has no constrained values (a live call's has them):\n%s\nwant %s", allowed, want)
	}
}

// The reviewers' page shows a held tool call's pinned argument as the
// operator's (a row marked pinned), not as one the model chose: the
// reviewer must tell pinned from model-chosen arguments.
func TestMCPPageMarksPinnedArgument(t *testing.T) {
	ctx := browser(t)
	b, _ := startMCPBroker(t, "approval: {mcp_wait: 0s}\n")
	s, rev := gatedSession(t, b, "t-mcp-page")
	cs := mcpClient(t, b, "issues", s.Token, "2025-11-25")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "crash"}})
	if err != nil || !res.IsError {
		t.Fatalf("held call: %v %+v", err, res)
	}
	id := b.PendingAction(t, rev)
	login(t, ctx, b, rev)
	var pinned, model string
	err = chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui/actions/"+id),
		chromedp.WaitVisible(chromedp.ID("request")),
	)
	if err == nil {
		pinned, err = chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("tr.pinned")].map(r => r.innerText).join("\n")`))
	}
	if err == nil {
		model, err = chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("tr.model")].map(r => r.innerText).join("\n")`))
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pinned, "repo") || strings.Contains(model, "repo") {
		t.Errorf("the pinned argument repo is not marked pinned: pinned rows %q, model rows %q", pinned, model)
	}
}
