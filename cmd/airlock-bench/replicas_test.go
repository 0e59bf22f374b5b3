package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLoadToolReplicasSmoke runs --store postgres briefly: the bench's own
// PostgreSQL starts, two brokers share a database, the load spread over
// both succeeds (round-robin, so every replica answers), beside the bare
// proxy and the broker on bbolt, and the report carries the figures. Skips
// without PostgreSQL; fails with CI=true (as internal/pgtest does).
func TestLoadToolReplicasSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker, starts PostgreSQL")
	}
	if err := postgresMissing(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: PostgreSQL is required)", err)
		}
		t.Skipf("%v", err)
	}
	bin := filepath.Join(t.TempDir(), "broker")
	if out, err := exec.Command("go", "build", "-o", bin, "../broker").CombinedOutput(); err != nil {
		t.Fatalf("build the broker: %v\n%s", err, out)
	}
	var out bytes.Buffer
	var errs lockedBuffer
	err := run(context.Background(), []string{"--broker", bin, "--store", "postgres", "--replicas", "2",
		"--duration", "1s", "--rounds", "1", "--concurrency", "2", "--variant", "GET", "--durability", "buffered"}, &out, &errs)
	if err != nil {
		t.Fatalf("airlock-bench: %v\n%s", err, errs.String())
	}
	report := out.String()
	row := func(target string) []string {
		re := regexp.MustCompile(`(?m)^\| buffered \| allowed GET \| 2 \| ` + regexp.QuoteMeta(target) + ` \| (\d+) \| [\d.]+ \| ([\d.]+|—) \| [\d.]+ ms \| [\d.]+ ms \| (\d+ µs|—) \| (\d+ µs|—) \| (\d+) \|$`)
		m := re.FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("no row for %q:\n%s", target, report)
		}
		if m[1] == "0" || m[5] != "0" {
			t.Errorf("%s: %s req/s, %s failed calls", target, m[1], m[5])
		}
		return m
	}
	row("bare reverse proxy")
	row("broker, bbolt")
	pg := row("postgres, 2 replicas")
	if pg[4] == "—" {
		t.Errorf("PostgreSQL's CPU per call not measured: %q", pg[0])
	}
	for _, want := range []string{"# Replicas on PostgreSQL\n\n## This run", "Load average (1 min)", "PostgreSQL 1"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// TestReplicasOptions: the postgres mode's options are checked, and the
// default run takes none of them.
func TestReplicasOptions(t *testing.T) {
	for _, args := range [][]string{
		{"--store", "mysql"},
		{"--pg-dsn", "host=/tmp"},
		{"--store", "postgres", "--replicas", "0"},
		{"--store", "postgres", "--replicas", "1,x"},
	} {
		if _, err := parseOptions(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err := parseOptions([]string{"--store", "postgres", "--replicas", "1,3"}, &bytes.Buffer{})
	if err != nil || len(o.replicas) != 2 || o.replicas[0] != 1 || o.replicas[1] != 3 {
		t.Errorf("--replicas 1,3: %v %v", o.replicas, err)
	}
	if o, _ := parseOptions(nil, &bytes.Buffer{}); o.store != "bbolt" || o.replicas != nil {
		t.Errorf("default run: store %q replicas %v", o.store, o.replicas)
	}
}
