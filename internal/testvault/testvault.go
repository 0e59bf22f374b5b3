// Package testvault starts the Vault v1.14.0 dev server that make test
// builds into .tools/vaultdev, for tests that need a real Vault.
package testvault

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Server is a running dev server on loopback.
type Server struct {
	tb    testing.TB
	bin   string
	Addr  string // http://127.0.0.1:port
	Token string
	cmd   *exec.Cmd
}

// Binary finds .tools/vaultdev above the working directory; with CI=true a
// missing binary fails the test, otherwise it skips with how to build it.
//
// AIRLOCK_VAULTDEV, when set, names the binary instead (a build of
// tools/vaultdev not yet in .tools).
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("AIRLOCK_VAULTDEV"); p != "" {
		return p
	}
	dir, _ := os.Getwd()
	for {
		p := filepath.Join(dir, ".tools", "vaultdev")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is missing: make test builds it (scripts/deps.sh)", p)
			}
			tb.Skipf("no Vault dev server at %s; build it with: scripts/deps.sh (or make test)", p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("no repository root found")
		}
		dir = parent
	}
}

// Start runs a fresh dev server on a free loopback port with root token token.
func Start(tb testing.TB, token string) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{tb: tb, bin: Binary(tb), Addr: "http://" + addr, Token: token}
	s.start()
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.tb.Helper()
	cmd := exec.Command(s.bin, "-addr", strings.TrimPrefix(s.Addr, "http://"), "-token", s.Token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.tb.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "VAULT_TOKEN=") {
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- fmt.Errorf("vaultdev exited before it was ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			s.tb.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		s.tb.Fatal("vaultdev did not start in 60s")
	}
	s.cmd = cmd
}

// Stop kills the server (an outage); its data is gone.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a fresh server on the same address with the same token.
func (s *Server) Restart() {
	s.Stop()
	s.start()
}

// Client is a root client of the server.
func (s *Server) Client() *vaultapi.Client {
	s.tb.Helper()
	cfg := vaultapi.DefaultConfig()
	cfg.Address = s.Addr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		s.tb.Fatal(err)
	}
	c.SetToken(s.Token)
	return c
}

// PutKV writes data at mount/key (KV v2) and returns the new version.
func (s *Server) PutKV(mount, key string, data map[string]any) int {
	s.tb.Helper()
	sec, err := s.Client().KVv2(mount).Put(s.tb.Context(), key, data)
	if err != nil {
		s.tb.Fatalf("vault put %s/%s: %v", mount, key, err)
	}
	return sec.VersionMetadata.Version
}
