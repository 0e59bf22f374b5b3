// The command line: options and their checks.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// options is what the command line asks for.
type options struct {
	broker       string
	duration     time.Duration
	concurrency  []int
	out          string
	durabilities []string
	variant      string // run only the variants whose name contains this
	profile      string // write the broker's CPU profile of every point here
	breakdown    bool   // profile each measured round for the per-stage CPU breakdown
	rounds       int    // alternations of bare proxy and broker per point
	store        string // bbolt (the default run) or postgres (replicas beside bbolt)
	replicas     []int  // postgres: broker processes per cluster measured, e.g. 1,3
	pgDSN        string // postgres: an existing database instead of a server of our own
}

func (o options) wants(variant string) bool { return strings.Contains(variant, o.variant) }

// pprof says whether the proxies serve their profiles (debug.pprof).
func (o options) pprof() bool { return o.breakdown || o.profile != "" }

// profilePath is where a point's profiles go (NAME.allocs.pprof,
// NAME.rN.cpu.pprof), "" without --profile.
func (o options) profilePath(name string) string {
	if o.profile == "" {
		return ""
	}
	return filepath.Join(o.profile, strings.NewReplacer(" ", "_", ",", "", "/", "_").Replace(name))
}

// parseOptions parses and checks the command line; it creates the profile
// directory when one is asked for.
func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("airlock-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.broker, "broker", "bin/broker", "the broker binary")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "load per measurement (bounded)")
	conc := fs.String("concurrency", "1,16,64", "closed-loop callers")
	dur := fs.String("durability", "fsync,buffered", "audit durability modes to measure")
	fs.StringVar(&o.out, "out", "", "also write the report (markdown) to this file")
	fs.IntVar(&o.rounds, "rounds", 5, "alternate bare proxy and broker this many times per point")
	fs.StringVar(&o.variant, "variant", "", "run only the variants whose name contains this (e.g. GET, session, approve)")
	fs.StringVar(&o.profile, "profile", "", "directory for the profiles of every point: the broker's and the bare proxy's CPU per round (NAME.rN.cpu.pprof) and allocations (NAME.allocs.pprof)")
	fs.BoolVar(&o.breakdown, "breakdown", true, "take a CPU profile of each measured round of both proxies (debug.pprof) for the per-stage CPU breakdown")
	fs.StringVar(&o.store, "store", "bbolt", "bbolt: the broker beside the bare proxy; postgres: also brokers sharing one PostgreSQL (--replicas)")
	reps := fs.String("replicas", "1,3", "with --store postgres: broker processes on one database, per cluster measured")
	fs.StringVar(&o.pgDSN, "pg-dsn", "", "with --store postgres: use this database (else a PostgreSQL of the bench's own, from /usr/lib/postgresql)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch o.store {
	case "bbolt":
		if o.pgDSN != "" {
			return o, errors.New("--pg-dsn is for --store postgres")
		}
	case "postgres":
		for _, r := range strings.Split(*reps, ",") {
			var n int
			if _, err := fmt.Sscan(r, &n); err != nil || n < 1 || n > 8 {
				return o, fmt.Errorf("bad replicas %q (1..8)", r)
			}
			o.replicas = append(o.replicas, n)
		}
	default:
		return o, fmt.Errorf("--store must be bbolt or postgres, not %q", o.store)
	}
	if o.rounds < 1 || o.rounds > 100 {
		return o, errors.New("--rounds must be 1..100")
	}
	if o.duration > 2*time.Minute {
		return o, errors.New("--duration is capped at 2m")
	}
	for _, c := range strings.Split(*conc, ",") {
		var n int
		if _, err := fmt.Sscan(c, &n); err != nil || n < 1 || n > 512 {
			return o, fmt.Errorf("bad concurrency %q", c)
		}
		o.concurrency = append(o.concurrency, n)
	}
	o.durabilities = strings.Split(*dur, ",")
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return o, err
		}
	}
	return o, nil
}
