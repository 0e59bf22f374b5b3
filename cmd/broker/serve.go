package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/config"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/telemetry"
)

const usage = `usage: broker <command> [flags]

Server:
  serve --config FILE        run the broker
  dev                        run a throwaway broker with a demo upstream (no config)

Client (AIRLOCK_ADDR = control plane address, AIRLOCK_TOKEN = API token):
  session create|list|get|kill
  grant add|get|revoke
  tokens create|list|revoke
  killswitch status|engage|release
  audit export|verify
`

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], getenv, stdout, stderr)
	case "dev":
		return cmdDev(ctx, args[1:], getenv, stdout, stderr)
	case "session", "grant", "tokens", "killswitch", "audit":
		return cmdClient(ctx, args, getenv, stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func cmdServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "airlock.yaml", "configuration file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, getenv)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, getenv, stdout, stderr, nil)
}

// Addrs are the bound addresses of the two planes, and the proxy door's
// host:port ("" when it is off).
type Addrs struct{ Sandbox, Control, Proxy string }

// serve runs the broker until ctx ends. ready, if set, is called once both
// listeners are bound.
func serve(ctx context.Context, cfg *config.Config, getenv func(string) string, stdout, stderr io.Writer, ready func(Addrs)) error {
	log := newLogger(stderr, cfg.LogLevel)
	ups, vault, err := cfg.Build(getenv, log)
	if err != nil {
		return err
	}
	if vault != nil {
		defer vault.Close()
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	var hook *approval.Webhook
	if cfg.Approval.Webhook.URL != "" {
		hook = &approval.Webhook{URL: cfg.Approval.Webhook.URL, Secret: []byte(cfg.Approval.Webhook.Secret),
			Client: &http.Client{Timeout: 10 * time.Second}, Log: log.With("component", "webhook"), Now: time.Now}
	}
	tracing, err := telemetry.New(ctx, getenv) // OTEL_EXPORTER_OTLP_ENDPOINT etc.; off (no-op) without
	if err != nil {
		return err
	}
	defer tracing.Shutdown(context.WithoutCancel(ctx)) // after the broker's Close: flushes the last spans
	// The exporter's failures (a collector down) as log lines, not the SDK's own stderr output.
	if tracing.On() {
		tlog := log.With("component", "telemetry")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { tlog.Warn("trace export failed", "err", err) }))
	}
	reg := prometheus.NewRegistry()
	feed, _ := st.(broker.ChangeFeed) // replicas on one database follow each other's changes
	registerStoreMetrics(reg, st)
	b, err := broker.New(ctx, broker.Options{
		Changes: feed, ReplicaID: cfg.Store.ReplicaID, ActionLease: cfg.Approval.ExecutionLease,
		Sessions: st, Audit: st, Actions: st, Tokens: st, Killswitch: st, Meta: st, Health: st, Usage: usageOf(st), Upstreams: ups, AdminToken: cfg.AdminToken, MaxSessionTTL: cfg.MaxSessionTTL,
		DefaultTTL: cfg.DefaultTTL, EnforceIsolation: *cfg.EnforceIsolation, ApprovalTTL: cfg.Approval.Timeout, MaxPending: cfg.Approval.MaxPendingPerSession, MaxStreams: cfg.MaxStreams,
		RateLimit: rate.Limit(cfg.RateLimit.PerSession), RateBurst: cfg.RateLimit.Burst,
		Webhook: hook, Metrics: reg, Now: time.Now, Log: log,
		CheckpointEvery: cfg.Audit.CheckpointEvery, CheckpointEach: cfg.Audit.CheckpointInterval,
		ProxyCA: cfg.ProxyListen != "", Tracer: tracing.Tracer(),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	api, err := httpapi.New(b, log.With("component", "http"), httpapi.UIOptions{SessionTTL: cfg.UI.SessionTTL, SecureCookies: *cfg.UI.Secure, Registry: reg, Pprof: cfg.Debug.Pprof, BodyIdleTimeout: cfg.BodyIdleTimeout})
	if err != nil {
		return err
	}

	lnS, err := net.Listen("tcp", cfg.SandboxListen)
	if err != nil {
		return fmt.Errorf("sandbox_listen: %w", err)
	}
	lnC, err := net.Listen("tcp", cfg.ControlListen)
	if err != nil {
		lnS.Close()
		return fmt.Errorf("control_listen: %w", err)
	}
	addrs := Addrs{Sandbox: "http://" + lnS.Addr().String(), Control: "http://" + lnC.Addr().String()}
	// The proxy door (DESIGN §8): a third listener on the sandbox plane.
	var lnP net.Listener
	var door *httpapi.ProxyDoor
	if cfg.ProxyListen != "" {
		if lnP, err = net.Listen("tcp", cfg.ProxyListen); err != nil {
			lnS.Close()
			lnC.Close()
			return fmt.Errorf("proxy_listen: %w", err)
		}
		addrs.Proxy = lnP.Addr().String()
		if cfg.ProxyURL != "" {
			addrs.Proxy = cfg.ProxyURL
		}
		door = api.NewProxyDoor(httpapi.ProxyOptions{Wait: cfg.Approval.ProxyWait, MaxTunnels: cfg.ProxyMaxTunnels})
		api.SetProxyURL(addrs.Proxy) // advertised in session answers
	}
	servers := []*http.Server{
		{Handler: api.Handler(httpapi.SandboxPlane), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		{Handler: api.Handler(httpapi.ControlPlane), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
	}
	log.Info("broker listening", "sandbox", addrs.Sandbox, "control", addrs.Control, "proxy", addrs.Proxy, "store", cfg.Store.Driver, "audit_durability", cfg.Audit.Durability, "upstreams", len(ups), "tracing", tracing.On())
	fmt.Fprintf(stdout, "airlock: sandbox plane %s, control plane %s\n", addrs.Sandbox, addrs.Control)
	if door != nil {
		fmt.Fprintf(stdout, "airlock: proxy door %s (HTTPS_PROXY=http://airlock:<session token>@%s)\n", lnP.Addr(), addrs.Proxy)
	}
	if ready != nil {
		ready(addrs)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, ln := range []net.Listener{lnS, lnC} {
		srv := servers[i]
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	if door != nil {
		g.Go(func() error { return door.Serve(lnP) })
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			errs = append(errs, srv.Shutdown(sctx))
		}
		if door != nil {
			errs = append(errs, door.Shutdown(sctx))
		}
		return errors.Join(errs...)
	})
	err = g.Wait()
	log.Info("broker stopped")
	return err
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch level {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
