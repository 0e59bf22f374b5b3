package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestMain lets a test start this package's broker as a separate process:
// brokertest.StartChild re-executes the test binary, which then is `broker
// serve` (used by the crash trials and the replicas, which must SIGKILL a
// real process). With AIRLOCK_TEST_CLI=1 it is the broker
// command itself, its arguments those of `broker` (a test puts a `broker`
// on PATH that runs it, to execute printed commands literally).
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_CLI") == "1" {
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "broker:", err)
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
	if code, child := brokertest.ServeChild(run); child {
		os.Exit(code) // this process was a broker, not the tests
	}
	os.Exit(pgtest.Main(m, pgtest.Config{})) // the PostgreSQL tests' server, started on first use
}

// startBroker starts this package's broker through run, as `broker serve`
// (brokertest.StartProc).
func startBroker(t *testing.T, o brokertest.ProcOptions) *brokertest.Proc {
	t.Helper()
	return brokertest.StartProc(t, run, o)
}
