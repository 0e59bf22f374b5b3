package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestMain lets a test start this package's broker as a separate process:
// the test binary re-executes itself with AIRLOCK_TEST_SERVE set to a config
// path, and then is `broker serve` (used by the crash trials, which must
// SIGKILL a real process). With AIRLOCK_TEST_CLI=1 it is the broker
// command itself, its arguments those of `broker` (a test puts a `broker`
// on PATH that runs it, to execute printed commands literally).
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_CLI") == "1" {
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "broker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if cfg := os.Getenv("AIRLOCK_TEST_SERVE"); cfg != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, []string{"serve", "--config", cfg}, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "broker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(pgtest.Main(m, pgtest.Config{})) // the PostgreSQL tests' server, started on first use
}
