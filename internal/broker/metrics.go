package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/fault"
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
		pendingCollector{b.appr},
	)
	if b.feed != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_change_feed_lag_seconds",
			Help: "Seconds since the change feed (LISTEN/NOTIFY and its catch-up read) last confirmed this replica knows every other replica's kills; past 2 sandbox calls are refused."},
			func() float64 { return b.FeedLag().Seconds() }),
			m.auditAppend)
	}
	return m
}

// pendingCollector reports the approval queue: both series from one cheap
// store query per scrape (the pending index holds each action's creation
// time), not a decode of every pending action per series.
type pendingCollector struct{ a *approvals }

var (
	pendingApprovalsDesc = prometheus.NewDesc("airlock_pending_approvals", "Actions waiting for a reviewer.", nil, nil)
	oldestPendingDesc    = prometheus.NewDesc("airlock_oldest_pending_approval_seconds", "Age of the oldest action waiting for a reviewer (0 when none).", nil, nil)
)

func (c pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingApprovalsDesc
	ch <- oldestPendingDesc
}

func (c pendingCollector) Collect(ch chan<- prometheus.Metric) {
	n, age := c.a.pendingStats()
	ch <- prometheus.MustNewConstMetric(pendingApprovalsDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, age.Seconds())
}

// pendingStats is the number of pending actions and the age of the oldest
// (0, 0 when none, or when the store cannot say).
func (s *approvals) pendingStats() (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, oldest, err := s.store.PendingSummary(ctx)
	if err != nil || n == 0 {
		return 0, 0
	}
	return n, s.now().Sub(oldest)
}

func (b *Broker) sessionEnded(l *LiveSession, at time.Time) {
	b.metrics.sessionLifetime.Observe(at.Sub(l.Session.CreatedAt).Seconds())
	why := "session expired"
	if l.revoked.Load() {
		why = "session killed"
	}
	b.creds.EndSession(l.Session.ID, why)
}

// callMetrics are the series of sandbox calls, counted by the pipeline
// (pipeline.go) alone.
type callMetrics struct {
	calls           *prometheus.CounterVec
	overhead        *prometheus.HistogramVec
	upstreamLatency *prometheus.HistogramVec
	limitHits       *prometheus.CounterVec
	waiters         prometheus.Gauge
	known           map[string]*upstream.Upstream // configured upstreams: the only label values
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
			Name: "airlock_upstream_seconds", Help: "Upstream call time, from sending to the last byte of the answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"upstream"}),
		limitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_limit_hits_total", Help: "Calls refused by a cap or limit: constraint, budget, max_uses, rate, pending.",
		}, []string{"kind"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_decision_waiters", Help: "Sandbox requests holding their connection for a reviewer's decision (Prefer: wait, or the proxy door's proxy_wait).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.overhead, m.upstreamLatency, m.limitHits, m.waiters)
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

func (m *callMetrics) upstream(name string, d time.Duration) {
	m.upstreamLatency.WithLabelValues(m.label(name)).Observe(d.Seconds())
}
