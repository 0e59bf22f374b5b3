// Command airlock-bench measures the broker side by side with a bare
// reverse proxy on the same machine and the same upstream: closed-loop load
// at several concurrencies, throughput and p50/p99 latency, and the ratios.
// Everything listens on 127.0.0.1 and every run stops by itself.
//
//	go build -o bin/broker ./cmd/broker
//	go run ./cmd/airlock-bench --broker bin/broker --duration 5s --out docs/performance.md
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	httppprof "net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
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

type options struct {
	broker       string
	duration     time.Duration
	concurrency  []int
	out          string
	durabilities []string
	variant      string // run only the variants whose name contains this
	profile      string // write the broker's CPU profile of every point here
	rounds       int    // alternations of bare proxy and broker per point
}

func (o options) wants(variant string) bool { return strings.Contains(variant, o.variant) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	fs.StringVar(&o.profile, "profile", "", "directory for the broker's CPU profile of every point (enables debug.pprof; perturbs the figures)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.rounds < 1 || o.rounds > 100 {
		return errors.New("--rounds must be 1..100")
	}
	if o.duration > 2*time.Minute {
		return errors.New("--duration is capped at 2m")
	}
	for _, c := range strings.Split(*conc, ",") {
		var n int
		if _, err := fmt.Sscan(c, &n); err != nil || n < 1 || n > 512 {
			return fmt.Errorf("bad concurrency %q", c)
		}
		o.concurrency = append(o.concurrency, n)
	}
	o.durabilities = strings.Split(*dur, ",")
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}

	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	bare, err := startBareProxy(ctx, up.URL(), o.profile != "", "")
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
	bareSync, err := startBareProxy(ctx, up.URL(), false, syncDir)
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
	text := rep.markdown()
	fmt.Fprint(stdout, text)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(text), 0o644)
	}
	return nil
}

// upstream is a tiny JSON API: the same for both proxies.
type upstream struct {
	srv  *http.Server
	ln   net.Listener
	hits chan time.Time
	want atomic.Bool
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{ln: ln, hits: make(chan time.Time, 1)}
	body := []byte(`{"items":[{"id":1,"name":"widget","price":12.5},{"id":2,"name":"gadget","price":7.25}],"next":null}`)
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.want.Load() && r.URL.Path == "/approve-probe" {
			select {
			case u.hits <- time.Now():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

func (u *upstream) URL() string { return "http://" + u.ln.Addr().String() }
func (u *upstream) Close()      { _ = u.srv.Close() }

// bareProxy is httputil.ReverseProxy injecting a header: the baseline. It
// runs in a child process (this binary, "bare-proxy --target URL").
type bareProxy struct {
	cmd *exec.Cmd
	url string
}

// startBareProxy starts the baseline. With fsyncDir, it also appends 1.2 KB
// to a file there and fdatasyncs it before forwarding each call: "the bare
// proxy plus one fsync" of the fsync-mode latency budget, measured in a
// request's path rather than apart from it.
func startBareProxy(ctx context.Context, target string, pprof bool, fsyncDir string) (*bareProxy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"bare-proxy", "--target", target, "--fsync-dir", fsyncDir}
	if pprof {
		args = append(args, "--pprof")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	line, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	p := &bareProxy{cmd: cmd}
	if _, err := fmt.Sscanf(line, "bare proxy %s", &p.url); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("unexpected start line %q", line)
	}
	return p, nil
}

// serveBareProxy serves until its parent closes stdin or ends. With
// --pprof, /debug/pprof/ serves its profiles (for comparing them with the
// broker's).
func serveBareProxy(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bare-proxy", flag.ContinueOnError)
	target := fs.String("target", "", "upstream URL")
	pprof := fs.Bool("pprof", false, "serve /debug/pprof/")
	fsyncDir := fs.String("fsync-dir", "", "append and fdatasync a file here before each call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tu, err := url.Parse(*target)
	if err != nil {
		return err
	}
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(tu)
			pr.Out.Header.Set("Authorization", "Bearer upstream-secret")
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var h http.Handler = rp
	if *fsyncDir != "" {
		f, err := os.CreateTemp(*fsyncDir, "bare-fsync-")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		var mu sync.Mutex
		rec := make([]byte, 1200)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			_, err := f.Write(rec)
			if err == nil {
				err = f.Sync()
			}
			mu.Unlock()
			if err != nil {
				fmt.Fprintln(os.Stderr, "bare proxy: fsync file:", err)
				http.Error(w, "fsync failed", http.StatusInternalServerError)
				return
			}
			rp.ServeHTTP(w, r)
		})
	}
	if *pprof {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.Handle("/debug/pprof/allocs", httppprof.Handler("allocs"))
		h = mux
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = srv.Close() }()
	fmt.Fprintf(stdout, "bare proxy http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (p *bareProxy) URL() string { return p.url }
func (p *bareProxy) Close()      { stopChild(p.cmd) }

// startChild starts cmd with a stdin pipe (closed to stop it) and returns
// the first line it prints.
func startChild(cmd *exec.Cmd) (string, error) {
	if _, err := cmd.StdinPipe(); err != nil {
		return "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	line := make([]byte, 0, 256)
	buf := make([]byte, 1)
	for {
		if _, err := out.Read(buf); err != nil {
			_ = cmd.Process.Kill()
			return "", fmt.Errorf("%s did not start: %w", cmd.Path, err)
		}
		if buf[0] == '\n' {
			break
		}
		line = append(line, buf[0])
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return string(line), nil
}

// stopChild interrupts cmd and waits for it (killing it after 15 s).
func stopChild(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// cpuTime is the CPU (user + system) a process has used so far, read from
// /proc; zero where there is no /proc.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// brokerProc is the real broker binary with a real config and durable audit.
type brokerProc struct {
	cmd              *exec.Cmd
	sandbox, control string
	admin            string
	dir              string
}

func startBroker(ctx context.Context, bin, durability, upstreamURL string, pprof bool, stderr io.Writer) (*brokerProc, error) {
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return nil, err
	}
	admin := "bench-admin-" + randHex(8)
	cfg := fmt.Sprintf(`sandbox_listen: 127.0.0.1:0
control_listen: 127.0.0.1:0
data_dir: %s
admin_token: %s
enforce_isolation: false
log_level: warn
audit: {durability: %s}
upstreams:
  - name: api
    base_url: %s
    sensitive: true
    credential: {source: env, name: BENCH_UPSTREAM_KEY}
`, filepath.Join(dir, "data"), admin, durability, upstreamURL)
	if pprof {
		cfg += "debug: {pprof: true}\n"
	}
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "BENCH_UPSTREAM_KEY=upstream-secret")
	cmd.Stderr = stderr
	line, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	b := &brokerProc{cmd: cmd, admin: admin, dir: dir}
	if _, err := fmt.Sscanf(line, "airlock: sandbox plane %s control plane %s", &b.sandbox, &b.control); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("unexpected start line %q", line)
	}
	b.sandbox = strings.TrimSuffix(b.sandbox, ",")
	return b, nil
}

func (b *brokerProc) Close() {
	stopChild(b.cmd)
	_ = os.RemoveAll(b.dir)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

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
		}}},
	}
}

// request describes one call a worker makes.
type request struct {
	method, url, token, body string
	want                     int
}

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
}

// cpuPerCall is the proxy's CPU time per answered call, "—" if unknown.
func (r result) cpuPerCall() string {
	if r.CPU <= 0 || r.Requests == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f µs", float64(r.CPU.Microseconds())/float64(r.Requests))
}

// tally accumulates the rounds of one measurement.
type tally struct {
	lats    []time.Duration
	errs    int
	elapsed time.Duration
	cpu     time.Duration
}

// run adds one round: n closed-loop callers for d against rq, and the CPU
// process pid used meanwhile.
func (t *tally) run(n int, d time.Duration, rq request, pid int) {
	c0 := cpuTime(pid)
	start := time.Now()
	lats, errs := load(n, d, rq)
	t.elapsed += time.Since(start)
	t.cpu += cpuTime(pid) - c0
	t.lats = append(t.lats, lats...)
	t.errs += errs
}

func (t *tally) result(n int) result {
	slices.Sort(t.lats)
	r := result{Concurrency: n, Requests: len(t.lats), Errors: t.errs, CPU: t.cpu}
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
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			bad := 0
			for time.Now().Before(deadline) {
				var body io.Reader
				if rq.body != "" {
					body = strings.NewReader(rq.body)
				}
				req, _ := http.NewRequest(rq.method, rq.url, body)
				if rq.token != "" {
					req.Header.Set("Authorization", "Bearer "+rq.token)
				}
				if rq.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				t := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				local = append(local, time.Since(t))
				if err != nil || resp.StatusCode != rq.want {
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

func measureMode(ctx context.Context, o options, durability string, up *upstream, bare, bareSync *bareProxy, rep *report, stderr io.Writer) error {
	b, err := startBroker(ctx, o.broker, durability, up.URL(), o.profile != "", stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	var s struct{ Token string }
	if _, err := post(b.control+"/v1/sessions", b.admin, sessionRequest(false), &s); err != nil {
		return err
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
	}
	for _, v := range variants {
		if !o.wants(v.name) {
			continue
		}
		for _, n := range o.concurrency {
			fmt.Fprintf(stderr, "%s: %s x%d\n", durability, v.name, n)
			// Alternate the two proxies in short rounds, so a drift in the
			// machine's speed (shared hosts have them) falls on both alike.
			var bt, kt, st tally
			// In fsync mode at one caller, also the bare proxy plus one
			// fdatasync per call: the p50 budget's yardstick.
			withSync := durability == "fsync" && n == 1 && v.base.url != ""
			synced := v.base
			synced.url = strings.Replace(v.base.url, bare.URL(), bareSync.URL(), 1)
			span := o.duration // how long the point runs, both proxies
			if v.base.url != "" {
				span *= 2
			}
			name := fmt.Sprintf("%s-%s-%d", durability, v.name, n)
			stop := profile(o, b.control, b.admin, name, span)
			stopBare := func() error { return nil }
			if v.base.url != "" {
				stopBare = profile(o, bare.URL(), "", "bare-"+name, span)
			}
			for range o.rounds {
				if v.base.url != "" {
					bt.run(n, o.duration/time.Duration(o.rounds), v.base, bare.cmd.Process.Pid)
				}
				kt.run(n, o.duration/time.Duration(o.rounds), v.broker, b.cmd.Process.Pid)
				if withSync {
					st.run(n, o.duration/time.Duration(o.rounds), synced, bareSync.cmd.Process.Pid)
				}
				if err := rep.sampleFsync(b.dir, 10); err != nil {
					return err
				}
			}
			if err := errors.Join(stop(), stopBare()); err != nil {
				return err
			}
			if v.base.url != "" {
				r := bt.result(n)
				r.Target, r.Variant, r.Durability = "bare proxy", v.name, durability
				rep.add(r)
			}
			if withSync {
				r := st.result(n)
				r.Target, r.Variant, r.Durability = "bare proxy + fsync", v.name, durability
				rep.add(r)
			}
			r := kt.result(n)
			r.Target, r.Variant, r.Durability = "broker", v.name, durability
			rep.add(r)
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

// profile starts fetching a proxy's CPU and allocation profiles for the
// coming point, if asked; the returned func waits for them and writes them
// out (NAME.cpu.pprof, NAME.allocs.pprof).
func profile(o options, addr, token, name string, span time.Duration) func() error {
	if o.profile == "" {
		return func() error { return nil }
	}
	secs := max(1, int(span/time.Second)-1)
	base := filepath.Join(o.profile, strings.NewReplacer(" ", "_", ",", "", "/", "_").Replace(name))
	var g errgroup.Group
	for _, kind := range []string{"profile", "allocs"} {
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
			return os.WriteFile(base+"."+strings.Replace(kind, "profile", "cpu", 1)+".pprof", data, 0o644)
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

type report struct {
	started   time.Time
	opts      options
	results   []result
	approvals []approval
	fsyncs    []time.Duration // one write+fdatasync on the broker's disk, sampled between rounds
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
