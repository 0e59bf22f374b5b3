package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// metrics are the broker's own series (the HTTP layer has the per-call ones).
type metrics struct {
	sessionLifetime prometheus.Histogram
	credFailures    *prometheus.CounterVec
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
		credFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_fetch_failures_total", Help: "Credential fetches that failed (the call failed closed).",
		}, []string{"upstream"}),
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
	reg.MustRegister(m.sessionLifetime, m.credFailures, m.auditCommit, m.auditRecords,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_active_sessions", Help: "Sessions alive in memory."},
			func() float64 { return float64(len(b.ActiveSessions())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_killswitch_engaged", Help: "1 while the global kill-switch is engaged."},
			func() float64 {
				if b.ks.engaged.Load() {
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

// CredentialFailed counts a failed credential fetch.
func (b *Broker) CredentialFailed(upstream string) {
	b.metrics.credFailures.WithLabelValues(upstream).Inc()
}

// credentialFetched audits a fetch from a secret store: the source and
// version, the lease id HMAC'd, never the value.
func (b *Broker) credentialFetched(name string, i upstream.FetchInfo) {
	reason := i.Source
	if i.Version > 0 {
		reason += fmt.Sprintf(" version %d", i.Version)
	}
	if i.LeaseID != "" {
		reason += " lease " + b.HMAC(i.LeaseID)
	}
	b.audit.AppendAsync(audit.Event{Type: audit.TypeCredentialFetch, Actor: audit.Actor{Kind: "system"}, Upstream: name, Reason: reason})
}

func (b *Broker) sessionEnded(l *Live, at time.Time) {
	b.metrics.sessionLifetime.Observe(at.Sub(l.Session.CreatedAt).Seconds())
	why := "session expired"
	if l.revoked.Load() {
		why = "session killed"
	}
	b.mint.endSession(l.Session.ID, why)
}
