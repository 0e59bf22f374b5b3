// A PostgreSQL of the bench's own for --store postgres: Debian's binaries,
// initdb into a temporary directory, a unix socket only, run as the
// postgres user when the bench runs as root (internal/pgtest does the same
// for tests, but only through testing.TB). Durability settings are
// PostgreSQL's defaults (fsync on): the figures are those of a real setup.

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgServer is the running PostgreSQL.
type pgServer struct {
	bin, dir string
	version  string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	done     chan struct{}
}

// pgBin is the newest /usr/lib/postgresql/<version>/bin with initdb and
// postgres, or "".
func pgBin() string {
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

// postgresMissing says why no PostgreSQL can run here, or nil.
func postgresMissing() error {
	if pgBin() == "" {
		return errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (Debian's postgresql package; scripts/deps.sh installs it)")
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
		}
	}
	return nil
}

// startPostgres initdb's and starts a server, ready to accept connections.
func startPostgres(stderr io.Writer) (*pgServer, error) {
	if err := postgresMissing(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "airlock-bench-pg-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: pgBin(), dir: dir, done: make(chan struct{})}
	s.version = filepath.Base(filepath.Dir(s.bin))
	if err := s.setup(stderr); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *pgServer) setup(stderr io.Writer) error {
	sock := filepath.Join(s.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		for _, p := range []string{s.dir, sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				return err
			}
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := s.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "--encoding=UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	s.cmd = s.command("postgres", "-D", data,
		"-c", "listen_addresses=", // the unix socket only
		"-c", "unix_socket_directories="+sock,
		"-c", "max_connections=200", // every replica's pool and listener
		"-c", "shared_buffers=64MB",
		"-c", "log_min_messages=warning",
	)
	out, err := s.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	// Its log goes to the bench's stderr until it is ready (where a
	// failure to start shows why), then only its warnings and errors.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if line := sc.Text(); !signalled || strings.Contains(line, "WARNING") || strings.Contains(line, "ERROR") || strings.Contains(line, "FATAL") || strings.Contains(line, "PANIC") {
				fmt.Fprintln(stderr, "postgres:", line)
			}
			if !signalled && strings.Contains(sc.Text(), "ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	select {
	case <-ready:
		return nil
	case <-s.done:
		return errors.New("postgres exited before it was ready")
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New("postgres not ready in 60s")
	}
}

func (s *pgServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"LC_ALL=C", "TZ=UTC", "PATH=" + s.bin + ":/usr/bin:/bin"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// dsn of database db, as the superuser over the unix socket.
func (s *pgServer) dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", filepath.Join(s.dir, "sock"), db)
}

// createDatabase creates an empty database and returns its DSN.
func (s *pgServer) createDatabase(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return s.dsn(name), nil
}

// cpu is the CPU the server has used: the postmaster's and its live
// children's (backends, WAL writer, checkpointer...), each with the
// children it reaped, so an ended backend still counts.
func (s *pgServer) cpu() time.Duration {
	pm := s.cmd.Process.Pid
	total := procCPU(pm, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		if ppid(pid) == pm {
			total += procCPU(pid, true)
		}
	}
	return total
}

// procCPU is a process's user + system CPU, with its reaped children's
// when children is set; zero when unknown.
func procCPU(pid int, children bool) time.Duration {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	n := 2
	if children {
		n = 4
	}
	var sum int64
	for _, x := range f[11 : 11+n] { // utime, stime, cutime, cstime
		v, _ := strconv.ParseInt(x, 10, 64)
		sum += v
	}
	return time.Duration(sum) * time.Second / clockTicks
}

// ppid is a process's parent, 0 when unknown.
func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// statFields are /proc/<pid>/stat's fields after the command name (field
// 3, the state, first).
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// Close stops the server (fast shutdown) and deletes its files.
func (s *pgServer) Close() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
}
