// Load generation: the HTTP client, the calls and the closed loop.

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

var client = &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 512, IdleConnTimeout: 90 * time.Second}, Timeout: 30 * time.Second}

func post(url, token string, body any, out any) (int, error) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, err
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

func sessionRequest(gated bool) map[string]any {
	return map[string]any{
		"task_id": "bench", "ttl": "1h", "untrusted_input": gated, "isolation": "microvm",
		"grants": []any{map[string]any{"upstream": "api", "rules": []any{
			map[string]any{"method": "GET", "path": "/items"},
			map[string]any{"method": "POST", "path": "/orders", "deny_unknown": true, "irreversible": false, "constraints": map[string]any{
				"body.sku": map[string]any{"pattern": "[A-Z]{3}-[0-9]{4}"}, "body.qty": map[string]any{"min": 1, "max": 10},
				"body.to": map[string]any{"pin": "acme"}}},
			map[string]any{"method": "POST", "path": "/approve-probe"},
		}}, mcpGrant()},
	}
}

// request describes one call a worker makes.
type request struct {
	method, url, token, body string
	urls                     []string // if set, instead of url: round-robin over these (replicas)
	want                     int
	client                   *http.Client // nil: the shared client (no proxy)
	header                   http.Header  // sent besides (an MCP message's headers)
	contains                 []byte       // the answer must hold it (an MCP result: 200 is also a JSON-RPC error's status)
}

// tally accumulates the rounds of one measurement.
type tally struct {
	lats    []time.Duration
	errs    int
	elapsed time.Duration
	cpu     time.Duration
	dbCPU   time.Duration

	// Of the rounds run with a probe (runProbed): allocations and context
	// switches (each -1 once unknown), and CPU per stage from the profiles.
	probed    int
	probedN   int // calls of the probed rounds
	mallocs   float64
	ctxsw     int64
	stageNS   map[string]int64
	profileOK bool
	profErr   error
}

// run adds one round: n closed-loop callers for d against rq, and the CPU
// process pid used meanwhile.
func (t *tally) run(n int, d time.Duration, rq request, pid int) {
	t.runCPU(n, d, rq, func() time.Duration { return cpuTime(pid) }, nil)
}

// runCPU is run with the CPU read by cpu (the proxies measured) and by db
// (the database they share, nil if none or unknown).
func (t *tally) runCPU(n int, d time.Duration, rq request, cpu, db func() time.Duration) {
	c0 := cpu()
	var d0 time.Duration
	if db != nil {
		d0 = db()
	}
	start := time.Now()
	lats, errs := load(n, d, rq)
	t.elapsed += time.Since(start)
	t.cpu += cpu() - c0
	if db != nil {
		t.dbCPU += db() - d0
	}
	t.lats = append(t.lats, lats...)
	t.errs += errs
}

// runProbed is run, also reading p's counters around the round and, when
// p has pprof, a CPU profile of the round (its first whole seconds).
func (t *tally) runProbed(n int, d time.Duration, rq request, p *probe) {
	type prof struct {
		stages map[string]int64
		err    error
	}
	var profiled chan prof
	if p.pprof != "" {
		profiled = make(chan prof, 1)
		round := t.probed
		go func() {
			st, err := p.cpuProfile(max(1, int(d/time.Second)), round)
			profiled <- prof{st, err}
		}()
	}
	c0 := p.read()
	before := len(t.lats)
	t.run(n, d, rq, p.pid)
	c1 := p.read()
	if t.probed == 0 {
		t.stageNS = map[string]int64{}
	}
	t.probed++
	t.probedN += len(t.lats) - before
	if c0.mallocs < 0 || c1.mallocs < 0 || t.mallocs < 0 {
		t.mallocs = -1
	} else {
		t.mallocs += c1.mallocs - c0.mallocs
	}
	if c0.ctxsw < 0 || c1.ctxsw < 0 || t.ctxsw < 0 {
		t.ctxsw = -1
	} else {
		t.ctxsw += c1.ctxsw - c0.ctxsw
	}
	if profiled != nil {
		pr := <-profiled
		if pr.err != nil {
			t.profErr = pr.err
			return
		}
		t.profileOK = true
		for k, v := range pr.stages {
			t.stageNS[k] += v
		}
	}
}

func (t *tally) result(n int) result {
	slices.Sort(t.lats)
	r := result{Concurrency: n, Requests: len(t.lats), Errors: t.errs, CPU: t.cpu, DBCPU: t.dbCPU, Allocs: -1, CtxSw: -1}
	if t.probed > 0 && t.probedN > 0 {
		if t.mallocs >= 0 {
			r.Allocs = t.mallocs / float64(t.probedN)
		}
		if t.ctxsw >= 0 {
			r.CtxSw = float64(t.ctxsw) / float64(t.probedN)
		}
		if t.profileOK {
			r.StageNS = t.stageNS
		}
	}
	if t.elapsed > 0 {
		r.RPS = float64(len(t.lats)) / t.elapsed.Seconds()
	}
	if len(t.lats) > 0 {
		r.P50 = t.lats[len(t.lats)/2]
		r.P99 = t.lats[min(len(t.lats)-1, len(t.lats)*99/100)]
	}
	return r
}

// load runs a closed loop: each of n callers sends the next request when the
// previous answer is read, for d. It returns every call's latency and the
// number of calls that failed or got an unexpected status.
func load(n int, d time.Duration, rq request) ([]time.Duration, int) {
	var (
		mu   sync.Mutex
		lats []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	c := client
	if rq.client != nil {
		c = rq.client
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		next := i // round-robin over rq.urls, each caller from its own start
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			bad := 0
			for time.Now().Before(deadline) {
				var body io.Reader
				if rq.body != "" {
					body = strings.NewReader(rq.body)
				}
				u := rq.url
				if len(rq.urls) > 0 {
					u = rq.urls[next%len(rq.urls)]
					next++
				}
				req, _ := http.NewRequest(rq.method, u, body)
				if rq.token != "" {
					req.Header.Set("Authorization", "Bearer "+rq.token)
				}
				if rq.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				for k, v := range rq.header {
					req.Header[k] = v
				}
				t := time.Now()
				resp, err := c.Do(req)
				held := true
				if err == nil {
					if rq.contains != nil {
						got, _ := io.ReadAll(resp.Body)
						held = bytes.Contains(got, rq.contains)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				local = append(local, time.Since(t))
				if err != nil || resp.StatusCode != rq.want || !held {
					bad++
				}
			}
			mu.Lock()
			lats = append(lats, local...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lats, errs
}
