// What a round costs a proxy besides its CPU time: allocations, context
// switches, and (from its CPU profile of the round) where its CPU went.

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// probe reads one proxy process's counters around a round.
type probe struct {
	pid     int
	metrics string // its Prometheus text endpoint (go_memstats_mallocs_total), "" for none
	pprof   string // its /debug/pprof base URL, "" for no CPU profile
	token   string // the bearer token pprof needs, if any
	save    string // with pprof: write each round's CPU profile as save.rN.cpu.pprof, "" for not
}

// counters are a process's cumulative figures at one moment.
type counters struct {
	cpu     time.Duration
	mallocs float64 // -1: unknown
	ctxsw   int64   // -1: unknown
}

func (p *probe) read() counters {
	c := counters{cpu: cpuTime(p.pid), mallocs: -1, ctxsw: ctxSwitches(p.pid)}
	if p.metrics != "" {
		c.mallocs = mallocs(p.metrics)
	}
	return c
}

// ctxSwitches sums the voluntary and involuntary context switches of every
// thread of pid (/proc/PID/status alone counts only the main thread's).
func ctxSwitches(pid int) int64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return -1
	}
	var n int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// mallocs reads go_memstats_mallocs_total from a Prometheus text endpoint
// (-1 if it cannot).
func mallocs(url string) float64 {
	resp, err := client.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_mallocs_total "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// cpuProfile fetches a CPU profile of secs seconds (starting now) and
// returns its CPU per stage; round numbers the saved file.
func (p *probe) cpuProfile(secs, round int) (map[string]int64, error) {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/profile?seconds=%d", p.pprof, secs), nil)
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cpu profile: %d %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	if p.save != "" {
		if err := os.WriteFile(fmt.Sprintf("%s.r%d.cpu.pprof", p.save, round), data, 0o644); err != nil {
			return nil, err
		}
	}
	return stageCPU(data)
}
