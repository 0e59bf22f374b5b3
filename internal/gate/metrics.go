package gate

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pendingCollector reports the approval queue: both series from one cheap
// store query per scrape (the pending index holds each action's creation
// time), not a decode of every pending action per series.
type pendingCollector struct{ s *Service }

var (
	pendingApprovalsDesc = prometheus.NewDesc("airlock_pending_approvals", "Actions waiting for a reviewer.", nil, nil)
	oldestPendingDesc    = prometheus.NewDesc("airlock_oldest_pending_approval_seconds", "Age of the oldest action waiting for a reviewer (0 when none).", nil, nil)
)

func (c pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingApprovalsDesc
	ch <- oldestPendingDesc
}

func (c pendingCollector) Collect(ch chan<- prometheus.Metric) {
	n, age := c.s.pendingStats()
	ch <- prometheus.MustNewConstMetric(pendingApprovalsDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, age.Seconds())
}

// pendingStats is the number of pending actions and the age of the oldest
// (0, 0 when none, or when the store cannot say).
func (s *Service) pendingStats() (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, oldest, err := s.store.PendingSummary(ctx)
	if err != nil || n == 0 {
		return 0, 0
	}
	return n, s.now().Sub(oldest)
}
