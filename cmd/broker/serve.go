package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/config"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/telemetry"
)

func newServeCmd(e *cliEnv) *cobra.Command {
	var path string
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker: the sandbox plane, the control plane and, if configured, the proxy door",
		Long: `Serve loads the configuration (every mistake is reported at once; see "broker config
check"), opens the store and serves until interrupted (SIGINT, SIGTERM).`,
		Example: "  broker serve --config airlock.yaml",
		Args:    positional(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path, e.getenv)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, e.getenv, e.stdout, e.stderr, nil)
		},
	}
	c.Flags().StringVar(&path, "config", "airlock.yaml", "configuration file")
	return c
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
	feed, _ := st.(changefeed.Feed) // replicas on one database follow each other's changes
	registerStoreMetrics(reg, st)
	b, err := broker.New(ctx, broker.Options{
		Changes: feed, ReplicaID: cfg.Store.ReplicaID, ActionLease: cfg.Approval.ExecutionLease,
		Ports:     broker.Ports{Sessions: st, Audit: st, Actions: st, Tokens: st, Killswitch: st, Meta: st, Health: st, Usage: usageOf(st)},
		Upstreams: ups, AdminToken: cfg.AdminToken, MaxSessionTTL: cfg.MaxSessionTTL,
		DefaultTTL: cfg.DefaultTTL, EnforceIsolation: *cfg.EnforceIsolation, ApprovalTTL: cfg.Approval.Timeout, MaxPending: cfg.Approval.MaxPendingPerSession, MaxStreams: cfg.MaxStreams,
		RateLimit: rate.Limit(cfg.RateLimit.PerSession), RateBurst: cfg.RateLimit.Burst,
		Webhook: hook, Metrics: reg, Clock: clock.Real(), Log: log,
		CheckpointEvery: cfg.Audit.CheckpointEvery, CheckpointEach: cfg.Audit.CheckpointInterval,
		ProxyCA: cfg.ProxyListen != "", Tracer: tracing.Tracer(),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	api, err := httpapi.New(b, log.With("component", "http"), httpapi.UIOptions{SessionTTL: cfg.UI.SessionTTL, SecureCookies: *cfg.UI.Secure, Registry: reg, Pprof: cfg.Debug.Pprof, BodyIdleTimeout: cfg.BodyIdleTimeout, MCPWait: *cfg.Approval.MCPWait})
	if err != nil {
		return err
	}

	l, err := listen(cfg, api)
	if err != nil {
		return err
	}
	log.Info("broker listening", "sandbox", l.addrs.Sandbox, "control", l.addrs.Control, "proxy", l.addrs.Proxy, "store", cfg.Store.Driver, "audit_durability", cfg.Audit.Durability, "upstreams", len(ups), "tracing", tracing.On())
	fmt.Fprintf(stdout, "airlock: sandbox plane %s, control plane %s\n", l.addrs.Sandbox, l.addrs.Control)
	if l.door != nil {
		fmt.Fprintf(stdout, "airlock: proxy door %s (HTTPS_PROXY=http://airlock:<session token>@%s)\n", l.proxy.Addr(), l.addrs.Proxy)
	}
	if ready != nil {
		ready(l.addrs)
	}
	err = l.serve(ctx, api)
	log.Info("broker stopped")
	return err
}

// listeners are the broker's open listeners: both planes, and the proxy
// door's when it is on.
type listeners struct {
	sandbox, control, proxy net.Listener
	door                    *httpapi.ProxyDoor
	addrs                   Addrs
}

// listen opens the configured listeners (none stays open on an error).
func listen(cfg *config.Config, api *httpapi.Server) (*listeners, error) {
	lnS, err := net.Listen("tcp", cfg.SandboxListen)
	if err != nil {
		return nil, fmt.Errorf("sandbox_listen: %w", err)
	}
	lnC, err := net.Listen("tcp", cfg.ControlListen)
	if err != nil {
		lnS.Close()
		return nil, fmt.Errorf("control_listen: %w", err)
	}
	l := &listeners{sandbox: lnS, control: lnC, addrs: Addrs{Sandbox: "http://" + lnS.Addr().String(), Control: "http://" + lnC.Addr().String()}}
	// The proxy door: a third listener on the sandbox plane.
	if cfg.ProxyListen != "" {
		if l.proxy, err = net.Listen("tcp", cfg.ProxyListen); err != nil {
			lnS.Close()
			lnC.Close()
			return nil, fmt.Errorf("proxy_listen: %w", err)
		}
		l.addrs.Proxy = l.proxy.Addr().String()
		if cfg.ProxyURL != "" {
			l.addrs.Proxy = cfg.ProxyURL
		}
		l.door = api.NewProxyDoor(httpapi.ProxyOptions{Wait: cfg.Approval.ProxyWait, MaxTunnels: cfg.ProxyMaxTunnels})
		api.SetProxyURL(l.addrs.Proxy) // advertised in session answers
	}
	return l, nil
}

// serve serves every listener until ctx ends, then shuts them down.
func (l *listeners) serve(ctx context.Context, api *httpapi.Server) error {
	servers := []*http.Server{
		{Handler: api.Handler(httpapi.SandboxPlane), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		{Handler: api.Handler(httpapi.ControlPlane), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, ln := range []net.Listener{l.sandbox, l.control} {
		srv := servers[i]
		g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	if l.door != nil {
		g.Go(func() error { return l.door.Serve(l.proxy) })
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			errs = append(errs, srv.Shutdown(sctx))
		}
		if l.door != nil {
			errs = append(errs, l.door.Shutdown(sctx))
		}
		return errors.Join(errs...)
	})
	return g.Wait()
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
