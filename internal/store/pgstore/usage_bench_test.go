package pgstore_test

import (
	"context"
	"testing"

	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/store"
)

// BenchmarkReserve is the exact limit's cost per allowed call on
// PostgreSQL (a server with the defaults, fsync on): one Reserve of a use
// and one budgeted amount (airlock_reserve: one round trip, one commit),
// from one caller ("serial": the latency a call pays) and from 16 on one
// grant (its row serializes them).
func BenchmarkReserve(b *testing.B) {
	srv := pgtest.StartServer(b, pgtest.Config{})
	st := MustOpenDSN(b, srv.NewDatabase(b), store.DurabilityFsync)
	ctx := context.Background()
	amounts, budget := map[string]float64{"body.amount": 1}, map[string]float64{"body.amount": 1e15}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := st.Reserve(ctx, "grt_serial", 0, amounts, budget); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("16-on-one-grant", func(b *testing.B) {
		b.SetParallelism(8) // 16 callers on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := st.Reserve(ctx, "grt_parallel", 0, amounts, budget); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
