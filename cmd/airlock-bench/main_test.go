package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestMain lets the test binary stand in for this command's child process
// (the bare proxy runs as "os.Executable() bare-proxy ...").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bare-proxy" {
		if err := serveBareProxy(os.Args[2:], os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLoadToolSmoke runs the load tool briefly against a freshly built
// broker: every process starts, calls succeed, and the report carries the
// figures and the budget check.
func TestLoadToolSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker")
	}
	bin := filepath.Join(t.TempDir(), "broker")
	build := exec.Command("go", "build", "-o", bin, "../broker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the broker: %v\n%s", err, out)
	}
	// The children's stderr is copied into errs by os/exec while run writes
	// its progress there too.
	var out bytes.Buffer
	var errs lockedBuffer
	err := run(context.Background(), []string{"--broker", bin, "--duration", "300ms", "--rounds", "1",
		"--concurrency", "1,2", "--variant", "GET"}, &out, &errs)
	if err != nil {
		t.Fatalf("airlock-bench: %v\n%s", err, errs.String())
	}
	report := out.String()
	// One row per durability and concurrency, with no failed call.
	rows := regexp.MustCompile(`(?m)^\| (fsync|buffered) \| allowed GET \| (1|2) \| (\d+) \| (\d+) \| [\d.]+ \|.* \| (\d+) \|$`).FindAllStringSubmatch(report, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 measured rows, got %d:\n%s", len(rows), report)
	}
	for _, r := range rows {
		if r[3] == "0" || r[4] == "0" || r[5] != "0" {
			t.Errorf("row %q: no calls or some failed", r[0])
		}
	}
	// Proxy mode: through HTTPS_PROXY with TLS inside, beside the bare
	// TLS-terminating proxy, and the comparison table.
	rows = regexp.MustCompile(`(?m)^\| (fsync|buffered) \| `+regexp.QuoteMeta(proxyVariant)+` \| (1|2) \| (\d+) \| (\d+) \| [\d.]+ \|.* \| (\d+) \|$`).FindAllStringSubmatch(report, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 proxy-mode rows, got %d:\n%s", len(rows), report)
	}
	for _, r := range rows {
		if r[3] == "0" || r[4] == "0" || r[5] != "0" {
			t.Errorf("row %q: no calls or some failed", r[0])
		}
	}
	for _, want := range []string{"## Proxy mode beside the REST door", "| proxy door (`HTTPS_PROXY`, CONNECT, session CA) |", "| bare TLS-terminating proxy (CONNECT) |",
		"bare proxy + one fdatasync per call", "One fsync on the broker's disk", "## Budget check (this run)", "p50 ≤ 1.25× bare", "(the bare proxy fsyncing once per call)"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBareTLSProxy checks proxy mode's baseline: CONNECT to the bench host,
// TLS terminated with the bare proxy's CA, the call forwarded with the
// header injected, over kept-alive tunnels; another destination refused.
func TestBareTLSProxy(t *testing.T) {
	up, err := startUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := startBareProxy(ctx, up.URL(), false, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pu, _ := url.Parse(p.URL())
	c, err := proxyClient(pu, p.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	tunnels := 0
	for range 3 {
		req, _ := http.NewRequest("GET", "https://"+proxyHost+"/items", nil)
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				tunnels++
			}
		}}
		resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "widget") || resp.TLS == nil {
			t.Fatalf("through the bare TLS proxy: %d %q (TLS %v)", resp.StatusCode, body, resp.TLS != nil)
		}
	}
	if tunnels != 1 {
		t.Errorf("%d tunnels for 3 calls, want 1 (keep-alive inside the tunnel)", tunnels)
	}
	if _, err := c.Get("https://elsewhere.test/items"); err == nil {
		t.Error("CONNECT to another destination succeeded")
	}
}
