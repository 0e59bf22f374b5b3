package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Config{NoFsync: true})) }

// TestFreshDatabasePerTest: each DSN names its own empty database on the
// package's one server, reached over its unix socket.
func TestFreshDatabasePerTest(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.DSN(t), pgtest.DSN(t)
	if a == b {
		t.Fatalf("two databases share a DSN: %s", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil || n != 0 {
		t.Errorf("a table of one database is seen in the other: %d, %v", n, err)
	}
	var fsync string
	if err := ca.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Errorf("fsync = %q, %v; this package asked for NoFsync", fsync, err)
	}
}
