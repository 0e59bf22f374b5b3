package main

import (
	"bytes"
	"context"
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
		"--concurrency", "1,2", "--variant", "allowed GET"}, &out, &errs)
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
	for _, want := range []string{"bare proxy + one fdatasync per call", "One fsync on the broker's disk", "## Budget check (this run)", "p50 ≤ 1.25× bare", "(the bare proxy fsyncing once per call)"} {
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
