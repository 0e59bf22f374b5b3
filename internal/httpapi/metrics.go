package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the HTTP layer's Prometheus series (the sandbox calls' are
// the call pipeline's, see broker.Do).
type metrics struct {
	sessionsCreated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sessionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_sessions_created_total", Help: "Sessions created.",
		}),
	}
	reg.MustRegister(m.sessionsCreated)
	return m
}
