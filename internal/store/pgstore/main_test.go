package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
)

// The contract suite never checks durability across a server crash: the
// package's server runs with fsync off (TESTING.md).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Config{NoFsync: true})) }

// MustOpen opens the store on a fresh database; closed by t.Cleanup.
func MustOpen(tb testing.TB, durability string) *pgstore.PG {
	tb.Helper()
	return MustOpenDSN(tb, pgtest.DSN(tb), durability)
}

// MustOpenDSN opens the store on dsn (another broker on the same database).
func MustOpenDSN(tb testing.TB, dsn, durability string) *pgstore.PG {
	tb.Helper()
	s, err := pgstore.Open(context.Background(), dsn, durability, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
