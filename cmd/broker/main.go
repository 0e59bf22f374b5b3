// Command broker is Airlock: a credential broker for AI-agent sandboxes.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// gcPercent is the broker's GC target when GOGC is not set: every call
// allocates, so a GC half as often saves CPU on every call, for a heap
// that may grow to three times the live data instead of two
// (docs/performance.md; GOGC=100 restores Go's default).
const gcPercent = 200

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(exitCode(err)) // 2: a usage error, 1: any other
	}
}
