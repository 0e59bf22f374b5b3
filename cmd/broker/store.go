package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/config"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
	"github.com/airlock-broker/airlock/internal/usage"
)

// usageOf is the store's own count of grants' limits when it has one
// (PostgreSQL: exact across brokers), else nil (bbolt: in memory).
func usageOf(st store.Store) usage.Store {
	u, _ := st.(usage.Store)
	return u
}

// openStore opens the configured store: the bbolt file in data_dir, or the
// PostgreSQL database (its pool opened and its schema migrated). Its Close
// is the caller's.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (store.Store, error) {
	log = log.With("component", "store")
	switch cfg.Store.Driver {
	case config.StorePostgres:
		st, err := pgstore.Open(ctx, cfg.Store.DSN, cfg.Audit.Durability, log)
		if err != nil {
			return nil, err
		}
		log.Info("store opened", "driver", config.StorePostgres)
		return st, nil
	default:
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data_dir: %w", err)
		}
		return boltstore.OpenBolt(filepath.Join(cfg.DataDir, "airlock.db"), cfg.Audit.Durability, log)
	}
}

// registerStoreMetrics adds the PostgreSQL pool's use to the metrics.
func registerStoreMetrics(reg prometheus.Registerer, st store.Store) {
	pg, ok := st.(*pgstore.PG)
	if !ok {
		return
	}
	pool := pg.Pool()
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_store_pool_acquired_conns", Help: "PostgreSQL connections of the pool in use."},
			func() float64 { return float64(pool.Stat().AcquiredConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_store_pool_total_conns", Help: "PostgreSQL connections the pool holds (idle and in use)."},
			func() float64 { return float64(pool.Stat().TotalConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_store_pool_max_conns", Help: "The pool's maximum connections (pool_max_conns)."},
			func() float64 { return float64(pool.Stat().MaxConns()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "airlock_store_pool_empty_acquire_total", Help: "Acquisitions that waited for a connection (the pool was exhausted)."},
			func() float64 { return float64(pool.Stat().EmptyAcquireCount()) }),
	)
}
