package broker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// metrics are the broker's own series (the HTTP layer has the per-call ones).
type metrics struct {
	sessionLifetime prometheus.Histogram
	auditCommit     prometheus.Histogram
	auditRecords    prometheus.Counter
	auditAppend     prometheus.Histogram // shared chain only (PostgreSQL)
}

func newMetrics(reg prometheus.Registerer, b *Broker) *metrics {
	m := &metrics{
		sessionLifetime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_session_lifetime_seconds",
			Help:    "How long sessions lived, observed when they end (killed or expired). Rising lifetimes mean ephemerality is eroding.",
			Buckets: []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400},
		}),
		auditCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_audit_commit_seconds", Help: "Duration of one audit group commit (write and fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		auditRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_audit_records_total", Help: "Audit records committed.",
		}),
		auditAppend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_audit_append_seconds",
			Help:    "Sequencing lag on the cluster's one audit chain: from a waited-for record's submission to the commit that appended it under the chain's head lock (waiting behind other replicas' batches included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.sessionLifetime, m.auditCommit, m.auditRecords,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_active_sessions", Help: "Sessions alive in memory."},
			func() float64 { return float64(len(b.ActiveSessions())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_killswitch_engaged", Help: "1 while the global kill-switch is engaged."},
			func() float64 {
				if b.ks.Engaged() {
					return 1
				}
				return 0
			}),
	)
	if b.feed != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_change_feed_lag_seconds",
			Help: "Seconds since the change feed (LISTEN/NOTIFY and its catch-up read) last confirmed this replica knows every other replica's kills; past 2 sandbox calls are refused."},
			func() float64 { return b.FeedLag().Seconds() }),
			m.auditAppend)
	}
	return m
}

func (b *Broker) sessionEnded(l *sessions.LiveSession, at time.Time) {
	b.metrics.sessionLifetime.Observe(at.Sub(l.Session.CreatedAt).Seconds())
	why := "session expired"
	if l.Revoked() {
		why = "session killed"
	}
	b.creds.EndSession(l.Session.ID, why)
	b.mcp.drop(l.Session.ID)
}

// callMetrics are the series of sandbox calls, counted by the pipeline
// (pipeline.go) alone.
type callMetrics struct {
	calls           *prometheus.CounterVec
	overhead        *prometheus.HistogramVec
	upstreamLatency *prometheus.HistogramVec
	limitHits       *prometheus.CounterVec
	mcpCalls        *prometheus.CounterVec
	waiters         prometheus.Gauge
	known           map[string]*upstream.Upstream // configured upstreams: the only label values
	// byClass are upstreamLatency's observers, by upstream label and
	// status class, made once (no label lookup per call).
	byClass map[string]*[classes]prometheus.Observer
}

// Status classes of an upstream call, airlock_upstream_seconds's class
// label: the answer's status class, or "error" for no answer.
const (
	class1xx = iota
	class2xx
	class3xx
	class4xx
	class5xx
	classError
	classes
)

var classNames = [classes]string{"1xx", "2xx", "3xx", "4xx", "5xx", "error"}

// statusClass is the class of an upstream's status (0: no answer).
func statusClass(status int) int {
	if status < 100 || status > 599 {
		return classError
	}
	return status/100 - 1
}

// unknownUpstream is the label of every name that is not configured: label
// values come from configuration only, so no request can add a series.
const unknownUpstream = "unknown"

func newCallMetrics(reg prometheus.Registerer, known map[string]*upstream.Upstream) *callMetrics {
	m := &callMetrics{
		known: known,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_calls_total", Help: "Sandbox calls by upstream, decision (allow, deny, error) and problem code.",
		}, []string{"upstream", "decision", "code"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_broker_overhead_seconds", Help: "Time a sandbox call spends in the broker, upstream time excluded.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"upstream"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "airlock_upstream_seconds", Help: "Upstream call time, from sending to the last byte of the answer (to the failure, for class error), by upstream and status class (1xx ... 5xx, error: no answer); a sampled trace's id as the exemplar.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"upstream", "class"}),
		limitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_limit_hits_total", Help: "Calls refused by a cap or limit: constraint, budget, max_uses, rate, pending.",
		}, []string{"kind"}),
		mcpCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_mcp_calls_total", Help: "MCP tools/call calls by upstream, tool (a tool named in the upstream's config, else other) and outcome (allow, deny, error, hold).",
		}, []string{"upstream", "tool", "outcome"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_decision_waiters", Help: "Sandbox requests holding their connection for a reviewer's decision (Prefer: wait, or the proxy door's proxy_wait).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.overhead, m.upstreamLatency, m.limitHits, m.mcpCalls, m.waiters)
	}
	m.byClass = make(map[string]*[classes]prometheus.Observer, len(known)+1)
	for _, name := range append(slices.Collect(maps.Keys(known)), unknownUpstream) {
		var obs [classes]prometheus.Observer
		for i := range obs {
			obs[i] = m.upstreamLatency.WithLabelValues(name, classNames[i])
		}
		m.byClass[name] = &obs
	}
	return m
}

func (m *callMetrics) label(name string) string {
	if _, ok := m.known[name]; ok {
		return name
	}
	return unknownUpstream
}

// limitHit is the cap or limit a refusal of kind k hit (the "resource-cap
// hits" KPI), or "".
func limitHit(k fault.Kind) string {
	switch k {
	case fault.ConstraintViolated:
		return "constraint"
	case fault.BudgetExceeded:
		return "budget"
	case fault.GrantExhausted:
		return "max_uses"
	case fault.RateLimited:
		return "rate"
	case fault.TooManyPending:
		return "pending"
	}
	return ""
}

// observe counts a call's decision with its code ("" when allowed or
// held), and the broker's time on it.
func (m *callMetrics) observe(name, decision, code string, overhead time.Duration) {
	name = m.label(name)
	m.calls.WithLabelValues(name, decision, code).Inc()
	if code != "" {
		if hit := limitHit(fault.KindOf(code)); hit != "" {
			m.limitHits.WithLabelValues(hit).Inc()
		}
	}
	m.overhead.WithLabelValues(name).Observe(overhead.Seconds())
}

// upstream observes an upstream call of d that answered status (0: none),
// with the trace of ctx as the exemplar when its span is sampled.
func (m *callMetrics) upstream(ctx context.Context, name string, status int, d time.Duration) {
	obs := m.byClass[m.label(name)][statusClass(status)]
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := obs.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	obs.Observe(d.Seconds())
}
