// Package pgserver runs a private PostgreSQL server from Debian's binaries
// (/usr/lib/postgresql/<version>/bin), without Docker: initdb into a
// temporary directory, listening only on a unix socket in it (no TCP port,
// so several servers on one machine never collide), run as the postgres
// user when the caller is root (PostgreSQL refuses to run as root). The
// tests (internal/pgtest) and the load tool (cmd/airlock-bench) start their
// servers with it.
package pgserver

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
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrMissing wraps why PostgreSQL cannot run here at all (no binaries, no
// user to run them as): a caller may skip rather than fail.
var ErrMissing = errors.New("PostgreSQL cannot run here")

// Options are how a server runs.
type Options struct {
	// NoFsync turns fsync (and full-page writes) off: faster, only for
	// runs that never check durability across a server crash.
	NoFsync bool
	// MaxConnections is max_connections (default 300: several brokers'
	// pools and listeners on one server).
	MaxConnections int
	// Log receives each line the server logs (nil: kept only for errors).
	Log func(line string)
}

// Server is a running PostgreSQL.
type Server struct {
	bin  string // the directory of initdb and postgres
	dir  string // temp root: data/, sock/
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	log  *logTail
}

// Bin finds the newest PostgreSQL server binaries (Debian's layout), or "".
func Bin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", 0
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestV {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			continue
		}
		best, bestV = d, v
	}
	return best
}

// runAs is the user to run PostgreSQL as: nil when not root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root and no postgres user to run PostgreSQL as: %v", ErrMissing, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Missing says why PostgreSQL cannot run here (wrapping ErrMissing), or nil.
func Missing() error {
	if Bin() == "" {
		return fmt.Errorf("%w: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (Debian's postgresql package; scripts/deps.sh installs it)", ErrMissing)
	}
	_, err := runAs()
	return err
}

// Start initdb's and starts a server, ready to accept connections.
func Start(o Options) (*Server, error) {
	if err := Missing(); err != nil {
		return nil, err
	}
	cred, _ := runAs()
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: Bin(), dir: dir, cred: cred, done: make(chan struct{}), log: &logTail{}}
	if err := s.setup(o); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) setup(o Options) error {
	sock := filepath.Join(s.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if s.cred != nil {
		for _, p := range []string{s.dir, sock} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := s.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "--encoding=UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	maxConns := o.MaxConnections
	if maxConns <= 0 {
		maxConns = 300
	}
	args := []string{"-D", data,
		"-c", "listen_addresses=", // the unix socket only
		"-c", "unix_socket_directories=" + sock,
		"-c", "max_connections=" + strconv.Itoa(maxConns),
		"-c", "shared_buffers=64MB",
		"-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic", // a caller's expected errors are not noise
	}
	if o.NoFsync {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	s.cmd = s.command("postgres", args...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			s.log.add(line)
			if o.Log != nil {
				o.Log(line)
			}
			if !signalled && strings.Contains(line, "ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	select {
	case <-ready:
		return nil
	case <-s.done:
		return fmt.Errorf("postgres exited before it was ready:\n%s", s.log.String())
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("postgres not ready in 60s:\n%s", s.log.String())
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

// Version is the server's major version ("15").
func (s *Server) Version() string { return filepath.Base(filepath.Dir(s.bin)) }

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// DSN of database name on this server, as the superuser over the unix
// socket (key=value form).
func (s *Server) DSN(name string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", filepath.Join(s.dir, "sock"), name)
}

// Exec runs one statement as the superuser on the postgres database.
func (s *Server) Exec(ctx context.Context, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// CreateDatabase creates an empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// Stop shuts the server down (fast mode: ends sessions, no long wait) and
// deletes its files.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
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
