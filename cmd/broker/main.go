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

// gcPercent is the broker's GC target when GOGC is not set: the heap is
// small (a few MB per thousand sessions), and every call allocates, so a
// GC twice as rare costs a little memory and saves CPU on every call
// (docs/performance.md).
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
