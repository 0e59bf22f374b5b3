// A PostgreSQL of the bench's own for --store postgres (internal/pgserver,
// as the tests' internal/pgtest). Durability settings are PostgreSQL's
// defaults (fsync on): the figures are those of a real setup.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/pgserver"
)

// pgServer is the running PostgreSQL.
type pgServer struct {
	*pgserver.Server
	version string
}

// postgresMissing says why no PostgreSQL can run here, or nil.
func postgresMissing() error { return pgserver.Missing() }

// startPostgres initdb's and starts a server, ready to accept connections.
// Its log goes to stderr until it is ready (where a failure to start shows
// why), then only its warnings and errors.
func startPostgres(stderr io.Writer) (*pgServer, error) {
	var ready atomic.Bool
	s, err := pgserver.Start(pgserver.Options{MaxConnections: 200, Log: func(line string) {
		if !ready.Load() || strings.Contains(line, "WARNING") || strings.Contains(line, "ERROR") || strings.Contains(line, "FATAL") || strings.Contains(line, "PANIC") {
			fmt.Fprintln(stderr, "postgres:", line)
		}
		if strings.Contains(line, "ready to accept connections") {
			ready.Store(true)
		}
	}})
	if err != nil {
		return nil, err
	}
	return &pgServer{Server: s, version: s.Version()}, nil
}

// createDatabase creates an empty database and returns its DSN.
func (s *pgServer) createDatabase(ctx context.Context, name string) (string, error) {
	return s.CreateDatabase(ctx, name)
}

// cpu is the CPU the server has used: the postmaster's and its live
// children's (backends, WAL writer, checkpointer...), each with the
// children it reaped, so an ended backend still counts.
func (s *pgServer) cpu() time.Duration {
	pm := s.PID()
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
func (s *pgServer) Close() { _ = s.Stop() }
