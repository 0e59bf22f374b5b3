package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// git through the proxy door (issue 14): Debian's git, configured only by
// the environment (HTTPS_PROXY, GIT_SSL_CAINFO, GIT_TERMINAL_PROMPT=0),
// clones and pushes over smart HTTP to a real `git http-backend` (the gitfx
// fixture, TLS with its own test CA) by the upstream's own name; the broker
// injects the token the fixture requires. A push the grant does not allow
// is refused before the upstream sees it.

const gitHost = "git.airlock.test"

// gitGrant lets the session clone acme/app.git and acme/lib.git, and push
// to acme/app.git only.
func gitGrant() map[string]any {
	return map[string]any{"upstream": "git", "rules": []any{
		map[string]any{"method": "GET", "path": "/acme/{repo}/info/refs", "constraints": map[string]any{
			"path.repo": map[string]any{"one_of": []any{"app.git", "lib.git"}}, "query.service": map[string]any{"one_of": []any{"git-upload-pack"}, "required": true}}},
		map[string]any{"method": "POST", "path": "/acme/{repo}/git-upload-pack", "irreversible": false, "constraints": map[string]any{
			"path.repo": map[string]any{"one_of": []any{"app.git", "lib.git"}}}},
		map[string]any{"method": "GET", "path": "/acme/app.git/info/refs", "constraints": map[string]any{
			"query.service": map[string]any{"one_of": []any{"git-receive-pack"}, "required": true}}},
		map[string]any{"method": "POST", "path": "/acme/app.git/git-receive-pack"},
	}}
}

// proxyGitBroker starts the git fixture (requiring the canary as the token
// of x-access-token) and a broker with the proxy door and a `git`
// upstream named git.airlock.test.
func proxyGitBroker(t *testing.T) (*brokertest.Proc, *gitfxServer) {
	t.Helper()
	g := gitfxNewServer(t, gitfxBasic("x-access-token", brokertest.Canary), gitHost)
	g.Repo(t, "acme/app.git")
	g.Repo(t, "acme/lib.git")
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: git
    base_url: ` + g.URL + `
    hosts: [` + gitHost + `]
    ca_cert: ` + g.CAFile + `
    max_body: 1048576
    forward_headers: [Git-Protocol]
    credential: {source: env, name: CANARY_TOKEN}
    inject: {basic_user: x-access-token}
proxy_listen: 127.0.0.1:0
`})
	return b, g
}

func TestProxyGitCloneAndPush(t *testing.T) {
	b, g := proxyGitBroker(t)
	ps := sandboxProxyFor(t, b, brokertest.TrustedSession(gitGrant()))
	env := append(gitfxEnv(t), "HTTPS_PROXY="+ps.ProxyURL, "GIT_SSL_CAINFO="+ps.CAFile)
	git := func(dir string, args ...string) (string, error) {
		out, err := gitfxCommand(t, dir, env, args...)
		brokertest.AssertNoCanary(t, "git output", []byte(out))
		return out, err
	}
	dir := t.TempDir()

	// Clone, change, push: the token is the broker's, never the sandbox's.
	if out, err := git(dir, "clone", "https://"+gitHost+"/acme/app.git", "app"); err != nil {
		t.Fatalf("git clone through the proxy: %v\n%s", err, out)
	}
	work := filepath.Join(dir, "app")
	if data, err := os.ReadFile(filepath.Join(work, "README.md")); err != nil || !strings.Contains(string(data), "acme/app.git") {
		t.Fatalf("cloned README.md: %q %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(work, "CHANGES"), []byte("from the sandbox\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitfxRun(t, work, env, "add", "CHANGES")
	gitfxRun(t, work, env, "commit", "-q", "-m", "change")
	if out, err := git(work, "push", "origin", "main"); err != nil {
		t.Fatalf("git push through the proxy: %v\n%s", err, out)
	}
	local := strings.TrimSpace(gitfxRun(t, work, env, "rev-parse", "HEAD"))
	if got := g.Head(t, "acme/app.git", "main"); got != local {
		t.Fatalf("upstream main = %q, want the pushed %q", got, local)
	}
	if n := g.ReceivePackPosts(); n != 1 {
		t.Fatalf("receive-pack POSTs = %d, want 1", n)
	}

	// A repository the grant lets the session read but not write.
	if out, err := git(dir, "clone", "https://"+gitHost+"/acme/lib.git", "lib"); err != nil {
		t.Fatalf("git clone lib: %v\n%s", err, out)
	}
	lib := filepath.Join(dir, "lib")
	libHead := g.Head(t, "acme/lib.git", "main")
	if err := os.WriteFile(filepath.Join(lib, "EVIL"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitfxRun(t, lib, env, "add", "EVIL")
	gitfxRun(t, lib, env, "commit", "-q", "-m", "evil")
	out, err := git(lib, "push", "origin", "main")
	if err == nil {
		t.Fatalf("git push to a repository the grant does not allow succeeded:\n%s", out)
	}
	if !strings.Contains(out, "403") {
		t.Errorf("the refused push does not show the 403:\n%s", out)
	}
	if n := g.ReceivePackPosts(); n != 1 {
		t.Errorf("receive-pack POSTs = %d after the refused push, want still 1", n)
	}
	if got := g.Head(t, "acme/lib.git", "main"); got != libHead {
		t.Errorf("lib main moved to %q", got)
	}
	// A repository the grant does not name at all.
	if out, err := git(dir, "clone", "https://"+gitHost+"/acme/secret.git", "secret"); err == nil {
		t.Fatalf("git clone of a repository outside the grant succeeded:\n%s", out)
	}

	// Every request the upstream saw carried the broker's credential.
	for _, r := range g.Requests() {
		if r.Authorization != g.WantAuth || r.Status != 200 {
			t.Errorf("upstream request %s %s: status %d, want 200 with the injected credential", r.Method, r.Path, r.Status)
		}
		if strings.Contains(r.Path, "secret.git") || strings.Contains(r.Path, "lib.git/git-receive-pack") {
			t.Errorf("a refused request reached the upstream: %s %s", r.Method, r.Path)
		}
	}
	audit := b.AuditExport()
	brokertest.AssertNoCanary(t, "audit", audit)
	refused := false
	for _, rec := range brokertest.ParseAudit(t, audit) {
		// The push's first request, info/refs?service=git-receive-pack,
		// fails the service constraint of the clone rule.
		if rec.Type == "call.denied" && rec.Code == "constraint_violated" && rec.Path == "/acme/lib.git/info/refs" {
			refused = true
		}
	}
	if !refused {
		t.Errorf("the refused push is not in the audit log:\n%s", audit)
	}
}

// TestProxyGitCloneManyRefs: git compresses a fetch negotiation over 1 KB
// (Content-Encoding: gzip); a repository with many tags makes its clone
// send one, which the broker decodes, checks and forwards decoded.
func TestProxyGitCloneManyRefs(t *testing.T) {
	b, g := proxyGitBroker(t)
	env := gitfxEnv(t)
	bare := filepath.Join(g.Root, "acme", "app.git")
	work := t.TempDir()
	gitfxRun(t, "", env, "clone", "-q", bare, work)
	for i := range 60 {
		gitfxRun(t, work, env, "tag", "-a", "-m", "release", fmt.Sprintf("v1.0.%d", i))
	}
	gitfxRun(t, work, env, "push", "-q", "--tags", bare)

	ps := sandboxProxyFor(t, b, brokertest.TrustedSession(gitGrant()))
	penv := append(gitfxEnv(t), "HTTPS_PROXY="+ps.ProxyURL, "GIT_SSL_CAINFO="+ps.CAFile)
	out, err := gitfxCommand(t, t.TempDir(), penv, "clone", "https://"+gitHost+"/acme/app.git", "app")
	brokertest.AssertNoCanary(t, "git output", []byte(out))
	if err != nil {
		t.Fatalf("git clone of a repository with 60 tags through the proxy: %v\n%s", err, out)
	}
	if !strings.Contains(string(b.AuditExport()), "git-upload-pack") {
		t.Fatal("the upload-pack call is not in the audit log")
	}
}
