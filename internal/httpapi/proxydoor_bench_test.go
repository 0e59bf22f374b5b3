package httpapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/telemetry"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// benchHost is the name the proxy-mode client calls the upstream by (the
// upstream's hosts); no resolver is asked: the client sends it in CONNECT.
const benchHost = "api.bench.test"

// doorBench is one broker serving both sandbox doors for the same GET of
// the same upstream: the REST door (/v1/proxy/api/items, bearer token) and
// the proxy door (https://api.bench.test/items through HTTPS_PROXY, TLS
// inside the tunnel, trusting the session's CA), as cmd/airlock-bench's
// "allowed GET" and "proxy mode" variants reach them.
type doorBench struct {
	sandbox string // the REST door's base URL
	token   string
	proxyTr *http.Transport // the proxy-mode client's transport (keep-alive)
	rest    *http.Client
	proxy   *http.Client // keep-alive: one tunnel, then requests in it
	oneShot *http.Client // a tunnel per request, as curl opens one per run
}

func newDoorBench(b testing.TB, opts ...func(*broker.Options)) *doorBench {
	b.Helper()
	body := []byte(`{"items":[{"id":1,"name":"widget","price":12.5},{"id":2,"name":"gadget","price":7.25}],"next":null}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	b.Cleanup(up.Close)
	base, _ := url.Parse(up.URL)
	src, err := upstream.NewEnvSource("BENCH_KEY", func(string) string { return "CANARY-bench-secret" })
	if err != nil {
		b.Fatal(err)
	}
	host, err := upstream.ParseHost(benchHost)
	if err != nil {
		b.Fatal(err)
	}
	u := &upstream.Upstream{Name: "api", Kind: "http", BaseURL: base, Sensitive: true, Timeout: 5 * time.Second, MaxBody: 1 << 20,
		Source: src, Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}, Hosts: []upstream.Host{host}}
	u.SetTransport(upstream.NewTransport())
	k := brokertest.MustOpenBroker(b, brokertest.WithUpstream(u), brokertest.WithNow(time.Now),
		brokertest.WithOptions(func(o *broker.Options) {
			o.ProxyCA = true
			for _, opt := range opts {
				opt(o)
			}
		}))
	api, err := httpapi.New(k.Broker, brokertest.Discard(), httpapi.UIOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sandbox := httptest.NewServer(api.Handler(httpapi.SandboxPlane))
	b.Cleanup(sandbox.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	door := api.NewProxyDoor(httpapi.ProxyOptions{Wait: time.Second})
	served := make(chan error, 1)
	go func() { served <- door.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = door.Shutdown(ctx)
		<-served
	})

	v, err := k.Broker.CreateSession(context.Background(), auth.Principal{ID: "op", Role: auth.RoleOperator}, sessions.SessionRequest{
		TaskID: "bench", TTL: time.Hour, UntrustedInput: new(bool),
		Grants: []grants.Spec{{Upstream: "api", Rules: []grants.Rule{{Method: "GET", Path: "/items"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(v.ProxyCAPEM) {
		b.Fatal("the session has no CA")
	}
	proxyURL := &url.URL{Scheme: "http", Host: ln.Addr().String(), User: url.UserPassword("airlock", v.Token)}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 4, ForceAttemptHTTP2: false}
	b.Cleanup(tr.CloseIdleConnections)
	oneShot := tr.Clone()
	oneShot.DisableKeepAlives = true
	rest := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(rest.CloseIdleConnections)
	return &doorBench{sandbox: sandbox.URL, token: v.Token, proxyTr: tr, rest: &http.Client{Transport: rest}, proxy: &http.Client{Transport: tr},
		oneShot: &http.Client{Transport: oneShot}}
}

// get sends one GET and checks the answer: 200, the upstream's body, no
// credential.
func (d *doorBench) get(b testing.TB, c *http.Client, req *http.Request) {
	b.Helper()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !bytes.HasPrefix(data, []byte(`{"items":`)) {
		b.Fatalf("%s: %d %s %v", req.URL, resp.StatusCode, data, err)
	}
	if bytes.Contains(data, []byte("CANARY")) {
		b.Fatal("the credential reached the sandbox")
	}
}

// BenchmarkProxyDoorRequest is one allowed GET through the proxy door inside
// a kept-alive tunnel (CONNECT and the handshake happen once, before the
// timer), the whole pipeline included: admit, Host check, rules, audit
// (buffered), the upstream on loopback, scrubbing. The client's side (TLS,
// HTTP) is in the figures too, as it is in RESTDoorRequest's.
func BenchmarkProxyDoorRequest(b *testing.B) {
	d := newDoorBench(b)
	req, _ := http.NewRequest("GET", "https://"+benchHost+"/items", nil)
	d.get(b, d.proxy, req) // open the tunnel
	b.ReportAllocs()
	for b.Loop() {
		d.get(b, d.proxy, req)
	}
}

// BenchmarkRESTDoorRequest is the same GET through the REST door
// (/v1/proxy/api/items, kept-alive plain HTTP): the reference for
// BenchmarkProxyDoorRequest.
func BenchmarkRESTDoorRequest(b *testing.B) {
	d := newDoorBench(b)
	req, _ := http.NewRequest("GET", d.sandbox+"/v1/proxy/api/items", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	d.get(b, d.rest, req)
	b.ReportAllocs()
	for b.Loop() {
		d.get(b, d.rest, req)
	}
}

// BenchmarkRESTDoorRequestTraced is BenchmarkRESTDoorRequest with tracing
// on: every call sampled, its spans (the call, the credential, the audit
// append, the upstream attempt) through the SDK's batch span processor to
// an exporter that keeps nothing (an OTLP exporter's network cost is the
// collector's, off the call's path). Against BenchmarkRESTDoorRequest it is
// the cost of tracing on; tracing off (no endpoint) is the no-op tracer,
// for which the pipeline starts no span at all.
func BenchmarkRESTDoorRequestTraced(b *testing.B) {
	exp := &discardSpans{}
	tr := telemetry.NewSDK(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	d := newDoorBench(b, func(o *broker.Options) { o.Tracer = tr.Tracer() })
	req, _ := http.NewRequest("GET", d.sandbox+"/v1/proxy/api/items", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	d.get(b, d.rest, req)
	b.ReportAllocs()
	for b.Loop() {
		d.get(b, d.rest, req)
	}
	b.StopTimer()
	if err := tr.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(exp.spans.Load())/float64(b.N+1), "spans/op")
}

// discardSpans is a span exporter that counts what it is given and keeps
// nothing.
type discardSpans struct{ spans atomic.Int64 }

func (d *discardSpans) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(s)))
	return nil
}

func (d *discardSpans) Shutdown(context.Context) error { return nil }

// BenchmarkProxyDoorTunnel is one GET in a tunnel of its own, as a client
// that opens one per run does (curl, git): CONNECT, admission and egress,
// the TLS handshake with the session's leaf (cached), the request, close.
func BenchmarkProxyDoorTunnel(b *testing.B) {
	d := newDoorBench(b)
	req, _ := http.NewRequest("GET", "https://"+benchHost+"/items", nil)
	d.get(b, d.oneShot, req) // issue the leaf
	b.ReportAllocs()
	for b.Loop() {
		d.get(b, d.oneShot, req)
	}
}
