package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
)

// BenchmarkAuditAppend is audit append throughput on PostgreSQL (records/s),
// beside boltstore's BenchmarkAuditAppend: group commit by the audit.Writer,
// 2, 16 and 64 concurrent writers, in both durability modes, on a server
// with the defaults (fsync on: every commit flushes the WAL in fsync mode).
// The "-2brokers" rows split the writers between two stores on one database
// (two replicas' writers taking turns on the chain's head row).
func BenchmarkAuditAppend(b *testing.B) {
	srv := pgtest.StartServer(b, pgtest.Config{})
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		for _, brokers := range []int{1, 2} {
			for _, par := range []int{1, 8, 32} { // 2, 16 and 64 writers on 2 cores
				name := fmt.Sprintf("group-commit-%s-%d", d, 2*par)
				if brokers > 1 {
					name += fmt.Sprintf("-%dbrokers", brokers)
				}
				b.Run(name, func(b *testing.B) {
					dsn := srv.NewDatabase(b)
					ws := make([]*audit.Writer, brokers)
					for i := range ws {
						w, err := audit.NewWriter(context.Background(), MustOpenDSN(b, dsn, d), time.Now, discard)
						if err != nil {
							b.Fatal(err)
						}
						defer w.Close()
						ws[i] = w
					}
					next := make(chan int, 1)
					next <- 0
					b.SetParallelism(par)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := <-next // spread the goroutines over the brokers
						next <- i + 1
						w := ws[i%len(ws)]
						for pb.Next() {
							if _, err := w.Append(context.Background(), audit.Event{Type: audit.TypeCallAllowed, SessionID: "ses_bench"}, nil); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				})
			}
		}
	}
}

// BenchmarkCreateSession is durable session creation on PostgreSQL (the
// session with one grant, its token, and its audit record), one caller at
// a time, beside the broker's BenchmarkCreateSession on bbolt: the
// "session creation p50 ≤ 2 ms" budget without HTTP.
func BenchmarkCreateSession(b *testing.B) {
	srv := pgtest.StartServer(b, pgtest.Config{})
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		b.Run(d, func(b *testing.B) {
			pg := MustOpenDSN(b, srv.NewDatabase(b), d)
			k := brokertest.MustOpenBroker(b, brokertest.WithDurability(d), brokertest.WithNow(time.Now),
				brokertest.WithUpstream(brokertest.Unreachable("pay")),
				brokertest.WithOptions(func(o *broker.Options) {
					o.Ports = brokertest.Ports(pg)
					o.Usage = nil // counted in memory, as on one broker
				}))
			f := false
			req := sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: &f, Grants: []grants.Spec{{
				Upstream: "pay", Rules: []grants.Rule{{Method: "POST", Path: "/accounts/{account}/payments",
					Constraints: map[string]grants.Constraint{"path.account": {Pin: "acct-1"}}}}}}}
			op := auth.Principal{ID: "op", Role: auth.RoleOperator}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := k.Broker.CreateSession(context.Background(), op, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
