// The report: the results and the markdown with the budget check.

package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

type report struct {
	started   time.Time
	opts      options
	results   []result
	approvals []approval
	fsyncs    []time.Duration // one write+fdatasync on the broker's disk, sampled between rounds
	database  string          // --store postgres: which database
	loads     []float64       // --store postgres: the 1-minute load average, between points
}

func (r *report) add(x result) { r.results = append(r.results, x) }

func (r *report) find(target, variant, dur string, n int) (result, bool) {
	for _, x := range r.results {
		if x.Target == target && x.Variant == variant && x.Durability == dur && x.Concurrency == n {
			return x, true
		}
	}
	return result{}, false
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Airlock performance\n\nMeasured %s on %d cores (%s/%s), %s per point, closed-loop callers on loopback.\n",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, r.opts.duration)
	b.WriteString("Regenerate with `make perf`. The load generator, the upstream, the bare proxy and the broker share the machine.\n\n")
	b.WriteString("| durability | variant | callers | bare proxy req/s | broker req/s | ratio | bare p50 | broker p50 | bare p99 | broker p99 | bare CPU/call | broker CPU/call | errors |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.results {
		if x.Target != "broker" || x.Variant == "session creation" {
			continue
		}
		base, ok := r.find("bare proxy", x.Variant, x.Durability, x.Concurrency)
		ratio, bRPS, bP50, bP99, bCPU := "—", "—", "—", "—", "—"
		if ok {
			ratio = fmt.Sprintf("%.2f", x.RPS/base.RPS)
			bRPS, bP50, bP99, bCPU = fmt.Sprintf("%.0f", base.RPS), ms(base.P50), ms(base.P99), base.cpuPerCall()
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			x.Durability, x.Variant, x.Concurrency, bRPS, x.RPS, ratio, bP50, ms(x.P50), bP99, ms(x.P99), bCPU, x.cpuPerCall(), x.Errors)
	}
	b.WriteString(r.perCallTable())
	b.WriteString(r.stageTable())
	b.WriteString("\n| durability | variant | callers | bare proxy + one fdatasync per call: req/s | p50 | p99 | its CPU/call |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.results {
		if x.Target == "bare proxy + fsync" {
			fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %s | %s | %s |\n", x.Durability, x.Variant, x.Concurrency, x.RPS, ms(x.P50), ms(x.P99), x.cpuPerCall())
		}
	}
	b.WriteString("\n| durability | session creation | callers | req/s | p50 | p99 | errors |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.results {
		if x.Variant == "session creation" {
			fmt.Fprintf(&b, "| %s | durable | %d | %.0f | %s | %s | %d |\n", x.Durability, x.Concurrency, x.RPS, ms(x.P50), ms(x.P99), x.Errors)
		}
	}
	b.WriteString("\n| durability | approve (API) → upstream receives the call | samples | p50 | p99 |\n| --- | --- | ---: | ---: | ---: |\n")
	for _, a := range r.approvals {
		if len(a.lats) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | reviewer POST approve → upstream | %d | %s | %s |\n", a.durability, len(a.lats), ms(a.lats[len(a.lats)/2]), ms(a.lats[min(len(a.lats)-1, len(a.lats)*99/100)]))
	}
	if len(r.fsyncs) > 0 {
		fmt.Fprintf(&b, "\nOne fsync on the broker's disk (1.2 KB write + fdatasync, %d samples between rounds): p50 %s, p99 %s.\n",
			len(r.fsyncs), ms(percentile(r.fsyncs, 50)), ms(percentile(r.fsyncs, 99)))
	}
	b.WriteString(r.proxyTable())
	b.WriteString(r.budget())
	return b.String()
}

// budget checks the figures of this run against DESIGN §7.
func (r *report) budget() string {
	var b strings.Builder
	b.WriteString("\n## Budget check (this run)\n\n| budget | measured | met |\n| --- | --- | --- |\n")
	row := func(what, got string, ok bool) {
		met := "yes"
		if !ok {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", what, got, met)
	}
	fsync := percentile(r.fsyncs, 50)
	for _, x := range r.results {
		base, ok := r.find("bare proxy", x.Variant, x.Durability, x.Concurrency)
		if x.Target != "broker" || !ok {
			continue
		}
		if x.Concurrency >= 16 {
			ratio := x.RPS / base.RPS
			row(fmt.Sprintf("%s, %s, %d callers: throughput ≥ 0.8× bare", x.Durability, x.Variant, x.Concurrency), fmt.Sprintf("%.2f×", ratio), ratio >= 0.8)
		}
		if x.Concurrency == 1 && x.Durability == "buffered" {
			row(fmt.Sprintf("buffered, %s, 1 caller: p50 ≤ 1.25× bare", x.Variant), fmt.Sprintf("%s vs %s (%.2f×)", ms(x.P50), ms(base.P50), float64(x.P50)/float64(base.P50)), float64(x.P50) <= 1.25*float64(base.P50))
		}
		if x.Concurrency == 1 && x.Durability == "fsync" && fsync > 0 {
			row(fmt.Sprintf("fsync, %s, 1 caller: p50 ≤ bare p50 + one fsync (fsync timed apart)", x.Variant), fmt.Sprintf("%s vs %s + %s", ms(x.P50), ms(base.P50), ms(fsync)), x.P50 <= base.P50+fsync)
		}
		if synced, ok := r.find("bare proxy + fsync", x.Variant, x.Durability, x.Concurrency); ok {
			row(fmt.Sprintf("fsync, %s, 1 caller: p50 ≤ bare p50 + one fsync (the bare proxy fsyncing once per call)", x.Variant), fmt.Sprintf("%s vs %s", ms(x.P50), ms(synced.P50)), x.P50 <= synced.P50)
		}
	}
	for _, x := range r.results {
		if x.Variant == "session creation" && x.Concurrency == 1 {
			row(fmt.Sprintf("%s: session creation p50 ≤ 2 ms", x.Durability), ms(x.P50), x.P50 <= 2*time.Millisecond)
		}
	}
	for _, a := range r.approvals {
		if len(a.lats) > 0 {
			p50 := percentile(a.lats, 50)
			row(fmt.Sprintf("%s: approve → upstream call ≤ 50 ms (API)", a.durability), ms(p50), p50 <= 50*time.Millisecond)
		}
	}
	return b.String()
}

// perCallTable puts each point's cost per call beside its ratio: CPU,
// allocations and context switches of both proxies.
func (r *report) perCallTable() string {
	var b strings.Builder
	b.WriteString("\n### Per call, beside the ratios\n\nCPU from /proc; allocations from each process's `go_memstats_mallocs_total`; context switches (voluntary and not) summed over every thread of the process (/proc/PID/task/*/status).\n\n")
	b.WriteString("| durability | variant | callers | ratio | bare CPU/call | broker CPU/call | CPU ×bare | bare allocs/call | broker allocs/call | bare ctx sw/call | broker ctx sw/call |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.results {
		if x.Target != "broker" || x.Variant == "session creation" {
			continue
		}
		base, ok := r.find("bare proxy", x.Variant, x.Durability, x.Concurrency)
		ratio, cpuRatio, bCPU, bAllocs, bSw := "—", "—", "—", "—", "—"
		if ok {
			ratio, bCPU, bAllocs, bSw = fmt.Sprintf("%.2f", x.RPS/base.RPS), base.cpuPerCall(), perCall(base.Allocs, 0), perCall(base.CtxSw, 2)
			if bc, kc := base.cpuUS(), x.cpuUS(); bc > 0 && kc > 0 {
				cpuRatio = fmt.Sprintf("%.2f", kc/bc)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.Durability, x.Variant, x.Concurrency,
			ratio, bCPU, x.cpuPerCall(), cpuRatio, bAllocs, perCall(x.Allocs, 0), bSw, perCall(x.CtxSw, 2))
	}
	return b.String()
}

// stageTable is the CPU per call of each stage (stages.go) of the profiled
// points, the broker's and the bare proxy's.
func (r *report) stageTable() string {
	names := stageNames()
	var rows strings.Builder
	for _, x := range r.results {
		us := x.stageUS()
		if us == nil || (x.Target != "broker" && x.Target != "bare proxy") {
			continue
		}
		fmt.Fprintf(&rows, "| %s | %s | %d | %s | %s |", x.Durability, x.Variant, x.Concurrency, x.Target, x.cpuPerCall())
		for _, n := range names {
			fmt.Fprintf(&rows, " %.1f |", us[n])
		}
		rows.WriteString("\n")
	}
	if rows.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n### Where the CPU goes (µs per call, by stage)\n\nFrom a CPU profile of every measured round of each proxy (`debug.pprof`, its first whole seconds): each sample is charged to the innermost frame of its stack that a stage names (cmd/airlock-bench/stages.go), and a stage's share of the samples is scaled to the CPU per call measured from /proc. *audit record*: sealing, hashing, the journal's write and sync; *bbolt apply*: the journal's records copied into bbolt; *upstream round trip*: the HTTP client side and `internal/upstream`; *HTTP server*: net/http's server, chi and the handlers; *broker pipeline*: the rest of the broker's own code (contexts, canonicalization, sessions).\n\n")
	b.WriteString("| durability | variant | callers | proxy | CPU/call |")
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	b.WriteString("\n| --- | --- | ---: | --- | ---: |" + strings.Repeat(" ---: |", len(names)) + "\n")
	b.WriteString(rows.String())
	return b.String()
}

// perCall formats a per-call figure, "—" if unknown (negative).
func perCall(v float64, decimals int) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}
