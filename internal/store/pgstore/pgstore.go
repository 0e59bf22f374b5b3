// Package pgstore is store.Store on PostgreSQL (jackc/pgx/v5, a pgxpool):
// every broker port over one database that several brokers may share. Its
// schema is versioned migrations (migrations/*.sql) applied at Open under an
// advisory lock, so replicas starting together apply each one once. The
// audit chain is one for the whole database: an append locks the chain's
// head row, seals its records onto it (audit.Sequencer), inserts them and
// moves the head in one transaction.
//
// Durability: every write commits before it returns, with
// synchronous_commit on (the WAL is flushed before the commit is
// acknowledged), whatever the server's default. In the audit log's
// buffered mode, the audit transactions alone commit with
// synchronous_commit off: a record survives a broker crash at once (it is
// committed) and a PostgreSQL crash once the WAL writer flushed it, within
// 3 × wal_writer_delay (600 ms by default).
package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
)

// PG is the PostgreSQL store.
type PG struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	buffered bool // audit transactions commit with synchronous_commit off
}

var _ store.Store = (*PG)(nil)

// Open connects to the database dsn names (a PostgreSQL URL or key=value
// string; pool settings such as pool_max_conns are read from it), applies
// the schema's migrations and returns the store.
func Open(ctx context.Context, dsn, durability string, log *slog.Logger) (*PG, error) {
	switch durability {
	case "", store.DurabilityFsync, store.DurabilityBuffered:
	default:
		return nil, fmt.Errorf("unknown audit durability %q", durability)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's error may quote the DSN, password included: say only what failed.
		return nil, errors.New("postgres: the store's dsn does not parse")
	}
	// Commits are durable before they are acknowledged, whatever the
	// server's default (the audit's buffered mode relaxes its own
	// transactions only). Times are read in UTC.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "airlock-broker"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &PG{pool: pool, log: log, buffered: durability == store.DurabilityBuffered}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Pool is the store's connection pool (tests, metrics).
func (s *PG) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool's connections.
func (s *PG) Close() error {
	s.pool.Close()
	return nil
}

// Ready implements broker.HealthCheck: the database answers, with this
// broker's schema.
func (s *PG) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var seq int64
	if err := s.pool.QueryRow(ctx, "SELECT seq FROM audit_head").Scan(&seq); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key under which migrations run
// ("airlock" in ASCII): brokers starting together apply each one once.
const migrationLock = 0x6169726c6f636b

// migration is one versioned schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/NNNN_name.sql in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with its version", base)
		}
		sql, err := migrations.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(sql)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must be 1, 2, 3... without gaps", m.name)
		}
	}
	return out, nil
}

// migrate applies the migrations the database lacks, in one transaction
// under an advisory lock: a broker starting beside another waits for it,
// then finds them applied. A database migrated by a newer broker (a
// version this one does not know) is refused.
func (s *PG) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&have); err != nil {
			return err
		}
		if have > len(ms) {
			return fmt.Errorf("the database's schema is version %d, newer than this broker's %d: run a newer broker", have, len(ms))
		}
		for _, m := range ms[have:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
			s.log.Info("applied schema migration", "component", "store", "migration", m.name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

var (
	errSessionNotFound = store.PortNotFound(sessions.ErrNotFound)
	errTokenNotFound   = store.PortNotFound(apitokens.ErrNotFound)
	errMetaNotFound    = store.PortNotFound(meta.ErrNotFound)
)

// noRowsAs turns pgx.ErrNoRows into a port's not-found error.
func noRowsAs(err, portErr error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return portErr
	}
	return err
}

// timeOrNull stores a zero time as NULL.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeOf reads a nullable time column: NULL is the zero time; others in UTC.
func timeOf(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.UTC()
}

// limitOrAll is a LIMIT parameter: nil (no limit) for limit <= 0.
func limitOrAll(limit int) *int64 {
	if limit <= 0 {
		return nil
	}
	l := int64(limit)
	return &l
}
