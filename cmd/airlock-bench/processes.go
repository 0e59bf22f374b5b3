// The processes measured: the upstream, the bare proxy (a child process)
// and the broker binary, started and stopped.

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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
	tools := mcpHandler()
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			tools.ServeHTTP(w, r)
			return
		}
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
	cmd   *exec.Cmd
	url   string
	caPEM []byte // the CA of its TLS-terminating CONNECT (proxy mode), when asked for
}

// startBareProxy starts the baseline. With fsyncDir, it also appends 1.2 KB
// to a file there and fdatasyncs it before forwarding each call: "the bare
// proxy plus one fsync" of the fsync-mode latency budget, measured in a
// request's path rather than apart from it.
// With caDir, it also answers CONNECT to proxyHost, terminating TLS with a
// leaf of its own CA, whose PEM it writes there: the baseline of proxy mode.
func startBareProxy(ctx context.Context, target string, pprof bool, fsyncDir, caDir string) (*bareProxy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"bare-proxy", "--target", target, "--fsync-dir", fsyncDir}
	if pprof {
		args = append(args, "--pprof")
	}
	caFile := ""
	if caDir != "" {
		caFile = filepath.Join(caDir, "bare-proxy-ca.pem")
		args = append(args, "--mitm-ca-out", caFile)
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
	if caFile != "" {
		if p.caPEM, err = os.ReadFile(caFile); err != nil {
			stopChild(cmd)
			return nil, err
		}
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
	mitmCA := fs.String("mitm-ca-out", "", "answer CONNECT to "+proxyHost+", terminating TLS; write the CA's PEM here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tu, err := url.Parse(*target)
	if err != nil {
		return err
	}
	rp := &httputil.ReverseProxy{
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second},
		// Copy buffers reused across calls, as a tuned production proxy
		// would (without one, each call allocates 32 KB): a fair baseline.
		BufferPool: bufferPool{},
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
	inner := h // what the tunnels serve
	if *pprof {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/metrics", serveMallocs)
		mux.Handle("/debug/pprof/allocs", httppprof.Handler("allocs"))
		h = mux
	}
	if *mitmCA != "" {
		// Inside the tunnels, the same handler (the proxy, and the fsync
		// when asked): only TLS and CONNECT are added.
		m, err := newMITM()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*mitmCA, m.caPEM, 0o600); err != nil {
			return err
		}
		tunnels := &http.Server{Handler: inner, ReadHeaderTimeout: 5 * time.Second}
		defer tunnels.Close()
		go func() { _ = tunnels.Serve(m) }()
		h = m.handler(h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = srv.Close() }()
	fmt.Fprintf(stdout, "bare proxy http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bufferPool is httputil.BufferPool over a free list of 32 KB buffers (a
// channel: a sync.Pool of []byte would allocate a slice header per Put).
type bufferPool struct{}

var copyBuffers = make(chan []byte, 1024)

func (bufferPool) Get() []byte {
	select {
	case b := <-copyBuffers:
		return b
	default:
		return make([]byte, 32<<10)
	}
}

func (bufferPool) Put(b []byte) {
	select {
	case copyBuffers <- b:
	default:
	}
}

// serveMallocs answers go_memstats_mallocs_total as the broker's /metrics
// does (the Go collector's sum of the runtime's heap and tiny allocations),
// for the allocations per call of the baseline.
func serveMallocs(w http.ResponseWriter, _ *http.Request) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}
	metrics.Read(s)
	var n uint64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			n += x.Value.Uint64()
		}
	}
	fmt.Fprintf(w, "go_memstats_mallocs_total %d\n", n)
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

// startBroker starts the broker; store, if not empty, is its config's
// store line (its DSN as ${AIRLOCK_PG_DSN}, given in env).
func startBroker(ctx context.Context, bin, durability, upstreamURL string, pprof bool, store string, stderr io.Writer, env ...string) (*brokerProc, error) {
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
proxy_listen: 127.0.0.1:0
upstreams:
  - name: api
    base_url: %s
    hosts: [%s]
    sensitive: true
    credential: {source: env, name: BENCH_UPSTREAM_KEY}
  - name: tools
    type: mcp
    base_url: %[4]s/mcp
    credential: {source: env, name: BENCH_UPSTREAM_KEY}
`, filepath.Join(dir, "data"), admin, durability, upstreamURL, proxyHost)
	if pprof {
		cfg += "debug: {pprof: true}\n"
	}
	if store != "" {
		cfg += store + "\n"
	}
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", path)
	cmd.Env = append(append(os.Environ(), "BENCH_UPSTREAM_KEY=upstream-secret"), env...)
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
