package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// browser starts real headless Chromium (Debian's package) for one test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Chromium is required in CI at %s (make test installs Debian's chromium)", path)
		}
		t.Skipf("no %s; install it with: apt-get install -y chromium", path)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// textInto reads an element's text into dst, as one step of chromedp.Do.
func textInto[S chromedp.Selectable](sel S, dst *string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := chromedp.Text(sel)(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

// screenshot saves a page under test-artifacts/ (git-ignored).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("..", "..", "test-artifacts")
	_ = os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func login(t *testing.T, ctx context.Context, b *brokertest.Proc, token string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS("nav")),
	)
	if err != nil {
		t.Fatalf("log in: %v", err)
	}
}

func TestUIApproveInBrowser(t *testing.T) {
	ctx := browser(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "Rita Reviewer")
	s := brokertest.GatedSession(b, op, nil)

	res := make(chan brokertest.Response, 1)
	go func() {
		res <- b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 42, "memo": "invoice 7"}`, "Prefer", "wait=60")
	}()
	id := b.PendingAction(t, rev)
	login(t, ctx, b, rev)

	var listText string
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("table")),
		textInto(chromedp.CSS("main"), &listText),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(listText, "POST "+up.URL+"/base/payments") || !strings.Contains(listText, "t-gate") {
		t.Fatalf("pending list: %q", listText)
	}
	screenshot(t, ctx, "ui-pending")

	var request, pinnedRow, modelRow string
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/ui/actions/`+id+`"]`)),
		chromedp.WaitVisible(chromedp.ID("request")),
		textInto(chromedp.ID("request"), &request),
		textInto(chromedp.CSS("tr.pinned"), &pinnedRow),
		textInto(chromedp.CSS("tr.model"), &modelRow),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(request, "POST "+up.URL+"/base/payments") || !strings.Contains(request, `"to": "acme"`) {
		t.Fatalf("the page does not show the exact request: %q", request)
	}
	if !strings.Contains(pinnedRow, "body.to") || !strings.Contains(pinnedRow, "pinned by operator") {
		t.Fatalf("pinned value not marked: %q", pinnedRow)
	}
	if !strings.Contains(modelRow, "model") {
		t.Fatalf("model-chosen value not marked: %q", modelRow)
	}
	screenshot(t, ctx, "ui-action")

	var clicked time.Time
	// The browser notes when the form is submitted (its click handled), so
	// the figure can leave out the driver's own round trips.
	const noteSubmit = `document.getElementById("approve").form.addEventListener("submit",
		() => sessionStorage.setItem("airlockSubmitAt", String(Date.now())))`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](noteSubmit)); err != nil && !errors.Is(err, chromedp.ErrJSUndefined) {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("comment"), "matches invoice 7"),
		chromedp.Action[chromedp.Void](func(context.Context, *chromedp.Target) (chromedp.Void, error) {
			clicked = time.Now()
			return chromedp.Void{}, nil
		}),
		chromedp.Click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.Status != 200 || !strings.Contains(string(r.Body), "invoice 7") {
			t.Fatalf("the waiting sandbox call got %d %s", r.Status, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting sandbox call did not return after the approval")
	}
	// The figure for the resolution: approve click → upstream call (reported, never asserted).
	executed := up.Last(t).At
	submitMS, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`Number(sessionStorage.getItem("airlockSubmitAt"))`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("approve click → upstream call executed: %v from the driver's click call; %v from the browser's form submission",
		executed.Sub(clicked), executed.Sub(time.UnixMilli(int64(submitMS))))
	var status string
	_ = chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("status")), textInto(chromedp.ID("status"), &status))
	if status != "executed" {
		t.Errorf("action page shows %q after execution", status)
	}
	screenshot(t, ctx, "ui-action-executed")
}

func TestUIDenyAndCrossSiteRefused(t *testing.T) {
	ctx := browser(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "Dan")
	s := brokertest.GatedSession(b, op, nil)
	a := brokertest.DecodeAction(t, b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`))
	login(t, ctx, b, rev)

	// A page on another origin posts an approval form to the broker (with and without a guessed token).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><html><body><form id="f" method="post" action="%s/ui/actions/%s/approve">
<input name="comment" value="pwned"><input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit()</script><p id="sent">sent</p></body></html>`, b.Control, a.ID)
	}))
	defer evil.Close()
	var body string
	if err := chromedp.Do(ctx,
		chromedp.Navigate(evil.URL),
		chromedp.WaitVisible(chromedp.CSS("main")), // the broker's refusal page
		textInto(chromedp.CSS("main"), &body),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "CSRF") {
		t.Errorf("cross-site post answered: %q", body)
	}
	got := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+a.ID, rev, nil))
	if got.Status != "pending" {
		t.Fatalf("a cross-site form changed the action: %s", got.Status)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui/actions/"+a.ID),
		chromedp.WaitVisible(chromedp.ID("deny")),
		chromedp.SendKeys(chromedp.ID("comment"), "wrong vendor"),
		chromedp.Click(chromedp.ID("deny")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
	); err != nil {
		t.Fatal(err)
	}
	b.Do("GET", b.Sandbox+"/v1/actions/"+a.ID+"/result", s.Token, nil).WantProblem(t, 403, "approval_denied")
	if len(up.Requests()) != 0 {
		t.Fatal("a denied action reached the upstream")
	}
	screenshot(t, ctx, "ui-denied")
}

func TestUIKillCutsInFlightCallAndKillswitch(t *testing.T) {
	ctx := browser(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	rev := b.NewToken("reviewer", "Kim")
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/slow"}, map[string]any{"method": "GET", "path": "/ok"})))
	res := make(chan brokertest.Response, 1)
	go func() { res <- b.Do("GET", b.Sandbox+"/v1/proxy/api/slow", s.Token, nil) }()
	select {
	case <-up.Started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow call never reached the upstream")
	}
	login(t, ctx, b, rev)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui/sessions"),
		chromedp.WaitVisible(chromedp.ID("kill-"+s.ID)),
	); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "ui-sessions")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("kill-"+s.ID)), chromedp.WaitVisible(chromedp.CSS(".notice"))); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		r.WantProblem(t, 401, "session_revoked")
	case <-time.After(10 * time.Second):
		t.Fatal("killing the session from the page did not cut the in-flight call")
	}

	// The global kill-switch, behind a confirmation.
	other := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	var state string
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui/killswitch"),
		chromedp.WaitVisible(chromedp.ID("engage")),
		chromedp.SendKeys(chromedp.ID("reason"), "drill"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.Click(chromedp.ID("engage")),
		chromedp.WaitVisible(chromedp.CSS(".notice")),
		textInto(chromedp.ID("ks-state"), &state),
	); err != nil {
		t.Fatal(err)
	}
	if state != "engaged" {
		t.Fatalf("kill-switch page shows %q", state)
	}
	screenshot(t, ctx, "ui-killswitch")
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", other.Token, nil).WantProblem(t, 503, "killswitch_engaged")
}
