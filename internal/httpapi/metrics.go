package httpapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the broker's Prometheus series.
type metrics struct {
	calls           *prometheus.CounterVec
	overhead        *prometheus.HistogramVec
	upstreamLatency *prometheus.HistogramVec
	sessionsCreated prometheus.Counter
	limitHits       *prometheus.CounterVec
	waiters         prometheus.Gauge
	known           func(upstream string) bool // configured upstream names
}

// unknownUpstream is the label of every name that is not configured: label
// values come from configuration only, so no request can add a series.
const unknownUpstream = "unknown"

func (m *metrics) label(upstream string) string {
	if m.known(upstream) {
		return upstream
	}
	return unknownUpstream
}

// limitKinds are the denial codes counted as cap or limit hits (the
// "resource-cap hits" KPI).
var limitKinds = map[string]string{
	"constraint_violated": "constraint", "budget_exceeded": "budget", "grant_exhausted": "max_uses", "rate_limited": "rate",
	"too_many_pending": "pending",
}

func newMetrics(reg prometheus.Registerer, known func(string) bool) *metrics {
	m := &metrics{
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
		sessionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_sessions_created_total", Help: "Sessions created.",
		}),
		limitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_limit_hits_total", Help: "Calls refused by a cap or limit: constraint, budget, max_uses, rate, pending.",
		}, []string{"kind"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_decision_waiters", Help: "Sandbox requests holding their connection for a reviewer's decision (Prefer: wait, or the proxy door's proxy_wait).",
		}),
	}
	reg.MustRegister(m.calls, m.overhead, m.upstreamLatency, m.sessionsCreated, m.limitHits, m.waiters)
	return m
}

func (m *metrics) call(upstream, decision, code string, overhead time.Duration) {
	upstream = m.label(upstream)
	m.calls.WithLabelValues(upstream, decision, code).Inc()
	if kind, ok := limitKinds[code]; ok {
		m.limitHits.WithLabelValues(kind).Inc()
	}
	m.overhead.WithLabelValues(upstream).Observe(overhead.Seconds())
}

func (m *metrics) upstream(name string, d time.Duration) {
	m.upstreamLatency.WithLabelValues(m.label(name)).Observe(d.Seconds())
}
