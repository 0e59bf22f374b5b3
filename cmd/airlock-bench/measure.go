// Measurement: the points of each durability mode, profiles, session
// creation, approval latency and the fsync probe.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// result is one measurement.
type result struct {
	Target      string
	Variant     string
	Durability  string
	Concurrency int
	Requests    int
	Errors      int
	RPS         float64
	P50, P99    time.Duration
	CPU         time.Duration // CPU the proxy's process used during the point
	DBCPU       time.Duration // CPU the database's processes used (postgres mode, own server)
	Allocs      float64       // heap allocations per call (-1: not measured)
	CtxSw       float64       // context switches per call, all threads (-1: not measured)
	// StageNS is the CPU of the point's profiles per stage (stages.go), in
	// ns of samples; nil when not profiled.
	StageNS map[string]int64
}

// cpuUS is the CPU per call in µs, 0 if unknown.
func (r result) cpuUS() float64 {
	if r.CPU <= 0 || r.Requests == 0 {
		return 0
	}
	return float64(r.CPU.Nanoseconds()) / float64(r.Requests) / 1e3
}

// stageUS is the CPU per call (µs) of each stage: its share of the
// profiles' samples times the CPU per call measured from /proc.
func (r result) stageUS() map[string]float64 {
	var total int64
	for _, v := range r.StageNS {
		total += v
	}
	if total == 0 || r.cpuUS() == 0 {
		return nil
	}
	per := r.cpuUS()
	out := map[string]float64{}
	for k, v := range r.StageNS {
		out[k] = per * float64(v) / float64(total)
	}
	return out
}

// cpuPerCall is the proxy's CPU time per answered call, "—" if unknown.
func (r result) cpuPerCall() string {
	if r.CPU <= 0 || r.Requests == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f µs", float64(r.CPU.Microseconds())/float64(r.Requests))
}

func measureMode(ctx context.Context, o options, durability string, up *upstream, bare, bareSync *bareProxy, rep *report, stderr io.Writer) error {
	b, err := startBroker(ctx, o.broker, durability, up.URL(), o.pprof(), "", stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	var s struct {
		Token string
		Proxy *sessionProxy
	}
	if _, err := post(b.control+"/v1/sessions", b.admin, sessionRequest(false), &s); err != nil {
		return err
	}
	// Proxy mode: the same session and upstream, by its own name through
	// HTTPS_PROXY, TLS inside; beside a bare proxy terminating TLS alike.
	var viaBroker, viaBare *http.Client
	if o.wants(proxyVariant) {
		if s.Proxy == nil {
			return errors.New("proxy mode: the session's answer has no proxy (is proxy_listen on?)")
		}
		pu, err := s.Proxy.proxyURL(s.Token)
		if err != nil {
			return err
		}
		if viaBroker, err = proxyClient(pu, []byte(s.Proxy.CAPEM)); err != nil {
			return err
		}
		bu, _ := url.Parse(bare.URL())
		if viaBare, err = proxyClient(bu, bare.caPEM); err != nil {
			return err
		}
	}
	order := `{"sku":"ABC-1234","qty":3}`
	variants := []struct {
		name         string
		broker, base request
	}{
		{"allowed GET", request{method: "GET", url: b.sandbox + "/v1/proxy/api/items", token: s.Token, want: 200},
			request{method: "GET", url: bare.URL() + "/items", want: 200}},
		{"allowed POST, JSON constraints", request{method: "POST", url: b.sandbox + "/v1/proxy/api/orders", token: s.Token, body: order, want: 200},
			request{method: "POST", url: bare.URL() + "/orders", body: order, want: 200}},
		{"denied (no matching grant)", request{method: "DELETE", url: b.sandbox + "/v1/proxy/api/items", token: s.Token, want: 403}, request{}},
		{proxyVariant, request{method: "GET", url: "https://" + proxyHost + "/items", client: viaBroker, want: 200},
			request{method: "GET", url: "https://" + proxyHost + "/items", client: viaBare, want: 200}},
		{mcpVariant, request{method: "POST", url: b.sandbox + "/v1/mcp/tools", token: s.Token, body: mcpCall, header: mcpHeader(), want: 200, contains: mcpWant},
			request{method: "POST", url: bare.URL() + "/mcp", body: mcpCall, header: mcpHeader(), want: 200, contains: mcpWant}},
	}
	for _, v := range variants {
		if !o.wants(v.name) {
			continue
		}
		for _, n := range o.concurrency {
			if err := measurePoint(o, durability, v.name, n, v.broker, v.base, b, bare, bareSync, rep, stderr); err != nil {
				return err
			}
		}
	}
	if o.wants("session creation") {
		measureSessions(o, b, durability, rep, stderr)
	}
	if o.wants("approve") {
		lat, err := approveLatency(b, up, 30)
		if err != nil {
			return err
		}
		rep.approvals = append(rep.approvals, approval{durability: durability, lats: lat})
	}
	return nil
}

// measurePoint measures one variant at n callers: the broker's request
// and the bare proxy's (when the variant has one; in fsync mode at one
// caller also the bare proxy plus one fdatasync per call), alternated in
// short rounds so a drift in the machine's speed (shared hosts have them)
// falls on both alike.
func measurePoint(o options, durability, variant string, n int, broker, base request, b *brokerProc, bare, bareSync *bareProxy, rep *report, stderr io.Writer) error {
	fmt.Fprintf(stderr, "%s: %s x%d\n", durability, variant, n)
	var bt, kt, st tally
	withSync := durability == "fsync" && n == 1 && base.url != "" && base.client == nil
	synced := base
	synced.url = strings.Replace(base.url, bare.URL(), bareSync.URL(), 1)
	span := o.duration // how long the point runs, both proxies
	if base.url != "" {
		span *= 2
	}
	name := fmt.Sprintf("%s-%s-%d", durability, variant, n)
	stop := profile(o, b.control, b.admin, name, span)
	stopBare := func() error { return nil }
	if base.url != "" {
		stopBare = profile(o, bare.URL(), "", "bare-"+name, span)
	}
	kp := &probe{pid: b.cmd.Process.Pid, metrics: b.control + "/metrics"}
	bp := &probe{pid: bare.cmd.Process.Pid}
	if o.pprof() {
		kp.pprof, kp.token, kp.save = b.control+"/debug/pprof", b.admin, o.profilePath(name)
		bp.metrics, bp.pprof, bp.save = bare.URL()+"/metrics", bare.URL()+"/debug/pprof", o.profilePath("bare-"+name)
	}
	round := o.duration / time.Duration(o.rounds)
	for range o.rounds {
		if base.url != "" {
			bt.runProbed(n, round, base, bp)
		}
		kt.runProbed(n, round, broker, kp)
		if withSync {
			st.run(n, round, synced, bareSync.cmd.Process.Pid)
		}
		if err := rep.sampleFsync(b.dir, 10); err != nil {
			return err
		}
	}
	if err := errors.Join(kt.profErr, bt.profErr); err != nil {
		return err
	}
	if err := errors.Join(stop(), stopBare()); err != nil {
		return err
	}
	add := func(t *tally, target string) {
		r := t.result(n)
		r.Target, r.Variant, r.Durability = target, variant, durability
		rep.add(r)
	}
	if base.url != "" {
		add(&bt, "bare proxy")
	}
	if withSync {
		add(&st, "bare proxy + fsync")
	}
	add(&kt, "broker")
	return nil
}

// profile starts fetching a proxy's allocation profile for the coming
// point, if asked; the returned func waits for it and writes it out
// (NAME.allocs.pprof). The CPU profiles are the rounds' (probe).
func profile(o options, addr, token, name string, span time.Duration) func() error {
	if o.profile == "" {
		return func() error { return nil }
	}
	secs := max(1, int(span/time.Second)-1)
	base := o.profilePath(name)
	var g errgroup.Group
	for _, kind := range []string{"allocs"} {
		g.Go(func() error {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", addr, kind, secs), nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s profile: %d %s", kind, resp.StatusCode, data)
			}
			return os.WriteFile(base+"."+kind+".pprof", data, 0o644)
		})
	}
	return g.Wait
}

// measureSessions measures durable session creation at 16 callers and at one.
func measureSessions(o options, b *brokerProc, durability string, rep *report, stderr io.Writer) {
	fmt.Fprintf(stderr, "%s: session creation\n", durability)
	body, _ := json.Marshal(sessionRequest(false))
	var t16, t1 tally
	t16.run(16, o.duration, request{method: "POST", url: b.control + "/v1/sessions", token: b.admin, body: string(body), want: 201}, b.cmd.Process.Pid)
	r := t16.result(16)
	r.Target, r.Variant, r.Durability = "broker", "session creation", durability
	rep.add(r)
	// Also sequential, for the p50 of one creation.
	t1.run(1, o.duration/2, request{method: "POST", url: b.control + "/v1/sessions", token: b.admin, body: string(body), want: 201}, b.cmd.Process.Pid)
	r = t1.result(1)
	r.Target, r.Variant, r.Durability = "broker", "session creation", durability
	rep.add(r)
}

// approveLatency times reviewer approval → the upstream receiving the stored request.
func approveLatency(b *brokerProc, up *upstream, n int) ([]time.Duration, error) {
	var g struct{ Token string }
	if _, err := post(b.control+"/v1/sessions", b.admin, sessionRequest(true), &g); err != nil {
		return nil, err
	}
	var tok struct{ Token string }
	if _, err := post(b.control+"/v1/tokens", b.admin, map[string]any{"role": "reviewer", "name": "bench"}, &tok); err != nil {
		return nil, err
	}
	up.want.Store(true)
	defer up.want.Store(false)
	var out []time.Duration
	for i := 0; i < n; i++ {
		var a struct{ ID string }
		if _, err := post(b.sandbox+"/v1/proxy/api/approve-probe", g.Token, map[string]any{}, &a); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := post(b.control+"/v1/approvals/"+a.ID+"/approve", tok.Token, map[string]any{}, nil); err != nil {
			return nil, err
		}
		select {
		case at := <-up.hits:
			out = append(out, at.Sub(start))
		case <-time.After(10 * time.Second):
			return nil, errors.New("approved action never reached the upstream")
		}
	}
	slices.Sort(out)
	return out, nil
}

type approval struct {
	durability string
	lats       []time.Duration
}

// sampleFsync times n appends of 1.2 KB (two audit records) each followed by
// fdatasync, in dir: "one fsync on the same disk" of the latency budget.
func (r *report) sampleFsync(dir string, n int) error {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1200)
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		r.fsyncs = append(r.fsyncs, time.Since(t))
	}
	return nil
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
