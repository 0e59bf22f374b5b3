// Command airlock-bench measures the broker side by side with a bare
// reverse proxy on the same machine and the same upstream: closed-loop load
// at several concurrencies, throughput and p50/p99 latency, and the ratios.
// Everything listens on 127.0.0.1 and every run stops by itself.
//
//	go build -o bin/broker ./cmd/broker
//	go run ./cmd/airlock-bench --broker bin/broker --duration 5s --out docs/performance.md
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bare-proxy" {
		// The baseline runs as its own process, like the broker, so each
		// one's CPU time can be read apart from the load generator's.
		if err := serveBareProxy(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-bench bare-proxy:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-bench:", err)
		os.Exit(1)
	}
}

// run measures what args ask for and writes the report to stdout (and
// to --out); progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	caDir, err := os.MkdirTemp("", "airlock-bench-ca-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(caDir)
	if o.store == "postgres" {
		if o.profile != "" {
			return errReplicasOnly
		}
		bare, err := startBareProxy(ctx, up.URL(), false, "", "")
		if err != nil {
			return err
		}
		defer bare.Close()
		rep := &report{started: time.Now(), opts: o}
		if err := runReplicas(ctx, o, up, bare, rep, stderr); err != nil {
			return err
		}
		return write(rep.haMarkdown(), o.out, stdout)
	}
	bare, err := startBareProxy(ctx, up.URL(), o.pprof(), "", caDir)
	if err != nil {
		return err
	}
	defer bare.Close()
	// The same proxy with one fdatasync per call, on the disk the broker's
	// data directory is on (both under the system's temporary directory).
	syncDir, err := os.MkdirTemp("", "airlock-bench-fsync-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(syncDir)
	bareSync, err := startBareProxy(ctx, up.URL(), false, syncDir, "")
	if err != nil {
		return err
	}
	defer bareSync.Close()

	rep := &report{started: time.Now(), opts: o}
	for _, d := range o.durabilities {
		if err := measureMode(ctx, o, d, up, bare, bareSync, rep, stderr); err != nil {
			return err
		}
	}
	return write(rep.markdown(), o.out, stdout)
}

// write prints the report and writes it to out, if set.
func write(text, out string, stdout io.Writer) error {
	fmt.Fprint(stdout, text)
	if out != "" {
		return os.WriteFile(out, []byte(text), 0o644)
	}
	return nil
}
