package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// TestSequencingLagMetric: a broker on PostgreSQL reports the audit
// chain's sequencing lag (airlock_audit_append_seconds: submission to the
// commit under the head lock) beside the change feed's lag, one
// observation per waited-for record appended; a broker on bbolt (one writer, no
// shared chain) has no such series.
func TestSequencingLagMetric(t *testing.T) {
	up := brokertest.NewUpstream(t)
	count := regexp.MustCompile(`(?m)^airlock_audit_append_seconds_count (\d+)$`)
	scrape := func(b *brokertest.Proc) string {
		t.Helper()
		r := b.Do("GET", b.Control+"/metrics", "", nil)
		if r.Status != 200 {
			t.Fatalf("/metrics: %d", r.Status)
		}
		return string(r.Body)
	}
	b := pgBroker(t, up, pgtest.DSN(t), "")
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	for range 3 {
		if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != 200 {
			t.Fatalf("call: %d %s", r.Status, r.Body)
		}
	}
	var n int
	brokertest.Eventually(t, 5*time.Second, func() bool { // the calls' completion records follow asynchronously
		m := count.FindStringSubmatch(scrape(b))
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n >= 4 // the session's creation and 3 allowed records
	})
	if body := scrape(b); !regexp.MustCompile(`(?m)^airlock_change_feed_lag_seconds `).MatchString(body) {
		t.Error("no airlock_change_feed_lag_seconds beside the sequencing lag")
	}

	one := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	if count.MatchString(scrape(one)) {
		t.Error("a broker on bbolt reports airlock_audit_append_seconds")
	}
}
