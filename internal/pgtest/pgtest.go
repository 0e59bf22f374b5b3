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
// The server initdb's into a temporary directory and listens only on a
// unix socket in it (no TCP port, so test packages running at once never
// collide). When the tests run as root it runs as the postgres user
// (PostgreSQL refuses to run as root). Without PostgreSQL a test skips
// with how to install it, or fails when CI=true.
package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	bin  string // the directory of initdb and postgres
	dir  string // temp root: data/, sock/, the log
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	log  *logTail

	mu sync.Mutex
	n  int // databases created
}

var (
	pkg     struct{ cfg Config } // the package's Config, set by Main
	once    sync.Once
	server  *Server
	initErr error
	missing bool // no PostgreSQL to run: skip (or fail with CI=true)
)

// Main runs the package's tests (m.Run) and then stops the server, if one
// was started; it returns the exit code for os.Exit.
func Main(m *testing.M, cfg Config) int {
	pkg.cfg = cfg
	code := m.Run()
	if server != nil {
		if err := server.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// Bin finds the newest PostgreSQL server binaries (Debian's layout), or "".
func Bin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var best string
	var bestV int
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			continue
		}
		if v > bestV {
			best, bestV = d, v
		}
	}
	return best
}

// Get returns the package's server, starting it on first use. Without
// PostgreSQL the test skips (fails with CI=true); a server that cannot
// start fails the test.
func Get(tb testing.TB) *Server {
	tb.Helper()
	once.Do(func() { server, missing, initErr = start(pkg.cfg) })
	check(tb, missing, initErr)
	return server
}

// StartServer starts a server of tb's own, with cfg, stopped when tb ends:
// for a test or benchmark that needs other settings than the package's
// server (fsync on where the package runs without), or that stops it.
func StartServer(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s, missing, err := start(cfg)
	check(tb, missing, err)
	tb.Cleanup(func() {
		if err := s.stop(); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	return s
}

// check skips (fails with CI=true) when PostgreSQL is missing, and fails
// on any other error.
func check(tb testing.TB, missing bool, err error) {
	tb.Helper()
	if missing {
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
	if err := s.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		// FORCE ends connections a test left open (a broker it killed).
		if err := s.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.dsn(name)
}

// DSN of database name on this server, as the superuser.
func (s *Server) dsn(name string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", filepath.Join(s.dir, "sock"), name)
}

// Exec runs one statement as the superuser on the postgres database (for
// tests that act on the server: terminate a backend, create a database).
func (s *Server) Exec(ctx context.Context, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// start starts a server; missing reports that PostgreSQL cannot run here
// at all (no binaries, no user to run them as).
func start(cfg Config) (s *Server, missing bool, err error) {
	bin := Bin()
	if bin == "" {
		return nil, true, errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
	}
	dir, err := os.MkdirTemp("", "airlock-pgtest-")
	if err != nil {
		return nil, false, err
	}
	s = &Server{bin: bin, dir: dir, done: make(chan struct{})}
	if missing, err := s.setup(cfg); err != nil {
		os.RemoveAll(dir)
		return nil, missing, err
	}
	return s, false, nil
}

func (s *Server) setup(cfg Config) (missing bool, err error) {
	if err := os.Mkdir(filepath.Join(s.dir, "sock"), 0o700); err != nil {
		return false, err
	}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: run it as the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return true, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		for _, p := range []string{s.dir, filepath.Join(s.dir, "sock")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return false, err
			}
		}
	}
	data := filepath.Join(s.dir, "data")
	initdb := s.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "--encoding=UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return false, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	args := []string{"-D", data,
		"-c", "listen_addresses=", // the unix socket only
		"-c", "unix_socket_directories=" + filepath.Join(s.dir, "sock"),
		"-c", "max_connections=300", // several brokers' pools on one server
		"-c", "shared_buffers=64MB",
		"-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic", // a test's expected errors are not noise
	}
	if cfg.NoFsync {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	s.cmd = s.command("postgres", args...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return false, err
	}
	if err := s.cmd.Start(); err != nil {
		return false, fmt.Errorf("start postgres: %w", err)
	}
	s.log = &logTail{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			s.log.add(sc.Text())
			if !signalled && strings.Contains(sc.Text(), "ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case <-ready:
		return false, nil
	case <-s.done:
		return false, fmt.Errorf("postgres exited before it was ready:\n%s", s.log.String())
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return false, fmt.Errorf("postgres not ready in 60s:\n%s", s.log.String())
	}
}

// command runs a PostgreSQL binary as the server's user, in its directory.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"LC_ALL=C", "TZ=UTC", "PATH=" + s.bin + ":/usr/bin:/bin"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// stop shuts the server down (fast mode: ends sessions, no long wait) and
// deletes its files.
func (s *Server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return os.RemoveAll(s.dir)
}

// logTail keeps the server's last log lines, for errors.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *logTail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > 50 {
		l.lines = slices.Delete(l.lines, 0, len(l.lines)-50)
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
