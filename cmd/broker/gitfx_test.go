package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// A git smart-HTTP upstream for the proxy-door tests: the real
// `git http-backend` (Debian's git) served through net/http/cgi on a
// loopback TLS server whose certificate comes from its own test CA. It
// requires the credential the broker injects (401 otherwise, so git would
// prompt, or fail with GIT_TERMINAL_PROMPT=0, without the broker) and
// records what it received.

// gitfxRequest is one request the git upstream received.
type gitfxRequest struct {
	Method        string
	Path          string
	Query         string
	Authorization string
	Status        int
}

// gitfxServer is the git smart-HTTP upstream.
type gitfxServer struct {
	*httptest.Server
	// CAFile is the PEM file of the CA that issued the server's
	// certificate (the broker's upstream ca_cert, or GIT_SSL_CAINFO).
	CAFile string
	// Root holds the bare repositories (GIT_PROJECT_ROOT).
	Root string
	// WantAuth is the Authorization header every request must carry.
	WantAuth string

	mu   sync.Mutex
	reqs []gitfxRequest
}

// gitfxBasic is the Authorization of HTTP basic auth, as the broker injects
// it with `inject: {basic_user: ...}` (GitHub's form for git over HTTPS:
// user x-access-token, the token as password).
func gitfxBasic(user, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+secret))
}

// gitfxNewServer starts the git upstream on 127.0.0.1 with a certificate
// for 127.0.0.1, localhost and names; every request must carry wantAuth.
func gitfxNewServer(t *testing.T, wantAuth string, names ...string) *gitfxServer {
	t.Helper()
	git := brokertest.RequireTool(t, "git", "apt-get install -y git")
	backend := gitfxBackend(t, git)
	dir := t.TempDir()
	g := &gitfxServer{Root: filepath.Join(dir, "repos"), CAFile: filepath.Join(dir, "ca.pem"), WantAuth: wantAuth}
	if err := os.Mkdir(g.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	caPEM, cert := gitfxIssue(t, append([]string{"localhost"}, names...))
	if err := os.WriteFile(g.CAFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cgiH := &cgi.Handler{
		Path: backend,
		Env: []string{"GIT_PROJECT_ROOT=" + g.Root, "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + dir},
	}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := gitfxRequest{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization")}
		sw := &gitfxStatus{ResponseWriter: w, status: http.StatusOK}
		if subtle.ConstantTimeCompare([]byte(rec.Authorization), []byte(g.WantAuth)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="gitfx"`)
			http.Error(sw, "authentication required", http.StatusUnauthorized)
		} else {
			cgiH.ServeHTTP(sw, r)
		}
		rec.Status = sw.status
		g.mu.Lock()
		g.reqs = append(g.reqs, rec)
		g.mu.Unlock()
	}))
	g.Server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	g.Server.StartTLS()
	t.Cleanup(g.Server.Close)
	return g
}

// gitfxStatus records the status a handler wrote.
type gitfxStatus struct {
	http.ResponseWriter
	status int
}

func (s *gitfxStatus) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *gitfxStatus) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// gitfxBackend finds git-http-backend in git's exec path.
func gitfxBackend(t *testing.T, git string) string {
	t.Helper()
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("git-http-backend: %v", err)
	}
	return p
}

// gitfxIssue makes a test CA and a server certificate it signs, for
// 127.0.0.1, ::1 and names. It returns the CA's PEM and the server's
// certificate.
func gitfxIssue(t *testing.T, names []string) ([]byte, tls.Certificate) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gitfx test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: names, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Repo creates the bare repository name (e.g. "acme/app.git") with one
// commit on main holding README.md, open to pushes (http.receivepack).
func (g *gitfxServer) Repo(t *testing.T, name string) {
	t.Helper()
	bare := filepath.Join(g.Root, filepath.FromSlash(name))
	work := t.TempDir()
	env := gitfxEnv(t)
	gitfxRun(t, "", env, "init", "-q", "--bare", "-b", "main", bare)
	gitfxRun(t, "", env, "-C", bare, "config", "http.receivepack", "true")
	gitfxRun(t, "", env, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("# "+name+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitfxRun(t, work, env, "add", "README.md")
	gitfxRun(t, work, env, "commit", "-q", "-m", "initial")
	gitfxRun(t, work, env, "push", "-q", bare, "main")
}

// Head is the commit a branch of a bare repository points at ("" if none).
func (g *gitfxServer) Head(t *testing.T, name, branch string) string {
	t.Helper()
	out, err := gitfxCommand(t, "", gitfxEnv(t), "--git-dir", filepath.Join(g.Root, filepath.FromSlash(name)), "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// Requests is what the upstream received so far.
func (g *gitfxServer) Requests() []gitfxRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gitfxRequest(nil), g.reqs...)
}

// ReceivePackPosts counts the pushes that reached the upstream: the POSTs
// to .../git-receive-pack, whatever their answer.
func (g *gitfxServer) ReceivePackPosts() int {
	n := 0
	for _, r := range g.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/git-receive-pack") {
			n++
		}
	}
	return n
}

// gitfxEnv is an environment for git that reads no configuration of this
// machine and never prompts; a test adds the proxy and CA variables.
func gitfxEnv(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=Sandbox", "GIT_AUTHOR_EMAIL=sandbox@airlock.test", "GIT_COMMITTER_NAME=Sandbox", "GIT_COMMITTER_EMAIL=sandbox@airlock.test",
		"LANG=C", "LC_ALL=C",
	}
}

// gitfxCommand runs git with exactly env in dir; it returns the combined
// output.
func gitfxCommand(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	timer := time.AfterFunc(2*time.Minute, func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	err := cmd.Run()
	return out.String(), err
}

// gitfxRun runs git and fails the test if it fails.
func gitfxRun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := gitfxCommand(t, dir, env, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestGitfxFixture checks the fixture itself, without the broker: git
// without the credential is refused (401, and no prompt), git with it
// clones and pushes over smart HTTP through the TLS test CA.
func TestGitfxFixture(t *testing.T) {
	const token = "gitfx-token-0123"
	want := gitfxBasic("x-access-token", token)
	g := gitfxNewServer(t, want, "git.airlock.test")
	g.Repo(t, "acme/app.git")
	env := append(gitfxEnv(t), "GIT_SSL_CAINFO="+g.CAFile)
	url := g.URL + "/acme/app.git"

	dir := t.TempDir()
	if out, err := gitfxCommand(t, dir, env, "clone", "-q", url, "anon"); err == nil {
		t.Fatalf("clone without the credential succeeded:\n%s", out)
	}
	if rs := g.Requests(); len(rs) == 0 || rs[0].Status != http.StatusUnauthorized {
		t.Fatalf("the upstream did not refuse the anonymous clone: %+v", rs)
	}

	auth := []string{"-c", "http.extraHeader=Authorization: " + want}
	gitfxRun(t, dir, env, append(auth, "clone", "-q", url, "app")...)
	work := filepath.Join(dir, "app")
	if data, err := os.ReadFile(filepath.Join(work, "README.md")); err != nil || !strings.Contains(string(data), "acme/app.git") {
		t.Fatalf("cloned README.md: %q %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(work, "CHANGES"), []byte("pushed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitfxRun(t, work, env, "add", "CHANGES")
	gitfxRun(t, work, env, "commit", "-q", "-m", "change")
	gitfxRun(t, work, env, append(auth, "push", "-q", "origin", "main")...)
	local := strings.TrimSpace(gitfxRun(t, work, env, "rev-parse", "HEAD"))
	if got := g.Head(t, "acme/app.git", "main"); got != local {
		t.Fatalf("upstream main = %q, want the pushed %q", got, local)
	}
	if n := g.ReceivePackPosts(); n != 1 {
		t.Errorf("receive-pack POSTs = %d, want 1", n)
	}
	for _, r := range g.Requests()[1:] {
		if r.Authorization != want || r.Status != http.StatusOK {
			t.Errorf("request %+v: want the credential and 200", r)
		}
	}
}
