// Package pgtest runs a real PostgreSQL server for a test package, from
// Debian's binaries (/usr/lib/postgresql/<version>/bin), without Docker: one
// server per test package, started on first use, one fresh database per
// test, stopped by the package's TestMain.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Config{})) }
//
//	func TestX(t *testing.T) {
//		dsn := pgtest.DSN(t) // a fresh, empty database
//		...
//	}
//
// The server is internal/pgserver's (initdb into a temporary directory, a
// unix socket only, run as the postgres user under root). Without
// PostgreSQL a test skips with how to install it, or fails when CI=true.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/airlock-broker/airlock/internal/pgserver"
)

// Config is how a test package's server runs.
type Config struct {
	// NoFsync turns fsync (and full-page writes) off: faster, and only for
	// tests that never check durability across a server crash (TESTING.md:
	// the contract suite). Durability and crash tests keep the defaults.
	NoFsync bool
}

// Server is a running PostgreSQL for one test package.
type Server struct {
	*pgserver.Server

	mu sync.Mutex
	n  int // databases created
}

var (
	pkg     struct{ cfg Config } // the package's Config, set by Main
	once    sync.Once
	server  *Server
	initErr error
)

// Main runs the package's tests (m.Run) and then stops the server, if one
// was started; it returns the exit code for os.Exit.
func Main(m *testing.M, cfg Config) int {
	pkg.cfg = cfg
	code := m.Run()
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// Get returns the package's server, starting it on first use. Without
// PostgreSQL the test skips (fails with CI=true); a server that cannot
// start fails the test.
func Get(tb testing.TB) *Server {
	tb.Helper()
	once.Do(func() { server, initErr = start(pkg.cfg) })
	check(tb, initErr)
	return server
}

// StartServer starts a server of tb's own, with cfg, stopped when tb ends:
// for a test or benchmark that needs other settings than the package's
// server (fsync on where the package runs without), or that stops it.
func StartServer(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s, err := start(cfg)
	check(tb, err)
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	return s
}

func start(cfg Config) (*Server, error) {
	s, err := pgserver.Start(pgserver.Options{NoFsync: cfg.NoFsync})
	if err != nil {
		return nil, err
	}
	return &Server{Server: s}, nil
}

// check skips (fails with CI=true) when PostgreSQL is missing, and fails
// on any other error.
func check(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, pgserver.ErrMissing) {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("pgtest: %v (CI=true: PostgreSQL is required; scripts/deps.sh installs it)", err)
		}
		tb.Skipf("pgtest: %v; install Debian's postgresql package (scripts/deps.sh, or make test) to run this test", err)
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
}

// DSN creates a fresh, empty database for tb (dropped at its end) and
// returns its connection string (key=value form, unix socket).
func DSN(tb testing.TB) string {
	tb.Helper()
	return Get(tb).NewDatabase(tb)
}

// NewDatabase creates a fresh, empty database (from template1), dropped when
// tb ends, and returns its connection string.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	s.mu.Lock()
	s.n++
	name := fmt.Sprintf("airlock_test_%d", s.n)
	s.mu.Unlock()
	dsn, err := s.CreateDatabase(context.Background(), name)
	if err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		// FORCE ends connections a test left open (a broker it killed).
		if err := s.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return dsn
}
