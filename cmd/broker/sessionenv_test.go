package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// proxyBroker is the harness broker with the proxy door on and an
// upstream "gh" named api.github.test whose placeholder is GITHUB_TOKEN.
func proxyBroker(t *testing.T, up *brokertest.Upstream) *brokertest.Proc {
	t.Helper()
	return startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: gh
    base_url: ` + up.URL + `
    hosts: [api.github.test]
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
    placeholder: {env: GITHUB_TOKEN, format: "ghp_{random:36}"}
proxy_listen: 127.0.0.1:0
`})
}

type proxySession struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	Proxy struct {
		URL   string `json:"url"`
		CAPEM string `json:"ca_pem"`
	} `json:"proxy"`
	Placeholders map[string]string `json:"placeholders"`
}

// sessionEnvRun runs `broker session env` as a user would, with env as
// its environment; it returns stdout and stderr.
func sessionEnvRun(t *testing.T, b *brokertest.Proc, env map[string]string, args ...string) (string, string) {
	t.Helper()
	full := map[string]string{"AIRLOCK_ADDR": b.Control, "AIRLOCK_TOKEN": brokertest.ProcAdminToken, "HOME": t.TempDir()}
	for k, v := range env {
		full[k] = v
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), append([]string{"session", "env"}, args...), func(k string) string { return full[k] }, nil, &stdout, &stderr); err != nil {
		t.Fatalf("broker session env %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// shellVars evaluates script in sh and reads back the named variables.
func shellVars(t *testing.T, sh, script string, names []string) map[string]string {
	t.Helper()
	var probe strings.Builder
	probe.WriteString(script + "\n")
	for _, n := range names {
		probe.WriteString(`printf '%s=%s\0' ` + n + ` "$` + n + `"` + "\n")
	}
	cmd := exec.Command(sh, "-c", probe.String())
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	return got
}

var envNames = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE",
	"NODE_USE_ENV_PROXY", "GIT_HTTP_PROXY_AUTHMETHOD", "GITHUB_TOKEN"}

// TestSessionEnv: `broker session env` prints, in both formats, exactly
// the variables a sandbox needs; the sh format is quoting-safe (a CA path
// with quotes, spaces and $(...) arrives verbatim and runs nothing); the
// CA file is the session's; no private key anywhere.
func TestSessionEnv(t *testing.T) {
	sh := brokertest.RequireTool(t, "sh", "apt-get install -y dash")
	up := brokertest.NewUpstream(t)
	b := proxyBroker(t, up)
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, brokertest.TrustedSession(map[string]any{"upstream": "gh", "rules": []any{map[string]any{"method": "GET", "path": "/x"}}}))
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var s proxySession
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(s.Proxy.URL)
	if err != nil || pu.User.Username() != "airlock" {
		t.Fatalf("creation answer's proxy url %q", s.Proxy.URL)
	}
	if p, _ := pu.User.Password(); p != s.Token {
		t.Fatalf("the proxy url's password is not the session token")
	}

	dir := t.TempDir()
	caOut := filepath.Join(dir, `it's a "ca" $(touch pwned) `+"`id`"+`.pem`)
	stdout, stderr := sessionEnvRun(t, b, map[string]string{"AIRLOCK_SESSION_TOKEN": s.Token}, s.ID, "--ca-out", caOut)
	if strings.Contains(stderr, "warning") {
		t.Errorf("a warning with the token given: %s", stderr)
	}
	want := map[string]string{
		"HTTPS_PROXY": s.Proxy.URL, "https_proxy": s.Proxy.URL, "HTTP_PROXY": s.Proxy.URL, "http_proxy": s.Proxy.URL,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		"SSL_CERT_FILE": caOut, "REQUESTS_CA_BUNDLE": caOut, "NODE_EXTRA_CA_CERTS": caOut,
		"GIT_SSL_CAINFO": caOut, "CURL_CA_BUNDLE": caOut, "AWS_CA_BUNDLE": caOut,
		"NODE_USE_ENV_PROXY": "1", "GIT_HTTP_PROXY_AUTHMETHOD": "basic", "GITHUB_TOKEN": s.Placeholders["GITHUB_TOKEN"],
	}
	if len(s.Placeholders["GITHUB_TOKEN"]) != 40 {
		t.Fatalf("placeholders %v", s.Placeholders)
	}
	got := shellVars(t, sh, stdout, envNames)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("sh format: %s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("the sh output ran a command from the CA path")
	}
	pemFile, err := os.ReadFile(caOut)
	if err != nil || string(pemFile) != s.Proxy.CAPEM {
		t.Fatalf("the CA file is not the session's CA: %v", err)
	}
	if fi, _ := os.Stat(caOut); fi.Mode().Perm() != 0o644 {
		t.Errorf("CA file mode %v, want 0644", fi.Mode().Perm())
	}
	if !strings.Contains(stdout, "SSL_CERT_FILE replaces the system trust store") {
		t.Errorf("the sh output does not say that SSL_CERT_FILE replaces the trust store:\n%s", stdout)
	}

	// --format env: KEY=VALUE lines, verbatim, for docker run --env-file;
	// --ca-path names the file as the container sees it.
	envOut, _ := sessionEnvRun(t, b, map[string]string{"AIRLOCK_SESSION_TOKEN": s.Token}, s.ID, "--format", "env", "--ca-out", filepath.Join(dir, "ca.pem"), "--ca-path", "/etc/airlock/ca.pem")
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(envOut), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "export") {
			t.Fatalf("env format line %q", l)
		}
		lines[k] = v
	}
	for k, v := range want {
		if strings.HasSuffix(k, "_CA_BUNDLE") || k == "SSL_CERT_FILE" || k == "NODE_EXTRA_CA_CERTS" || k == "GIT_SSL_CAINFO" {
			v = "/etc/airlock/ca.pem"
		}
		if lines[k] != v {
			t.Errorf("env format: %s = %q, want %q", k, lines[k], v)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("env format has %d variables, want %d:\n%s", len(lines), len(want), envOut)
	}

	// Without the token: a clear placeholder in the URL and a warning.
	noTok, warn := sessionEnvRun(t, b, nil, s.ID, "--ca-out", filepath.Join(dir, "ca2.pem"))
	if !strings.Contains(warn, "warning: no session token") || !strings.Contains(noTok, "airlock:REPLACE_WITH_SESSION_TOKEN@") || strings.Contains(noTok, s.Token) {
		t.Errorf("without a token: stderr %q\n%s", warn, noTok)
	}
	// Without --ca-out the CA goes to the user's cache directory.
	home := t.TempDir()
	_, where := sessionEnvRun(t, b, map[string]string{"HOME": home}, s.ID)
	if data, err := os.ReadFile(filepath.Join(home, ".cache", "airlock", s.ID+"-ca.pem")); err != nil || string(data) != s.Proxy.CAPEM {
		t.Errorf("default CA file: %v (%s)", err, where)
	}

	for what, data := range map[string]string{"sh": stdout, "env": envOut, "logs": string(b.Logs.Bytes()), "answer": string(r.Body)} {
		if strings.Contains(data, "PRIVATE KEY") {
			t.Fatalf("%s carries a private key", what)
		}
		brokertest.AssertNoCanary(t, what, []byte(data))
	}
}

// TestSessionEnvCurl: with only the variables `broker session env` prints,
// a stock curl reaches the upstream by its real name through the proxy
// door; the placeholder it sends is dropped and the real credential
// injected; the answer it reads holds no credential.
func TestSessionEnvCurl(t *testing.T) {
	sh := brokertest.RequireTool(t, "sh", "apt-get install -y dash")
	brokertest.RequireTool(t, "curl", "apt-get install -y curl")
	up := brokertest.NewUpstream(t)
	b := proxyBroker(t, up)
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, brokertest.TrustedSession(map[string]any{"upstream": "gh", "rules": []any{map[string]any{"method": "GET", "path": "/x"}}}))
	var s proxySession
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	stdout, _ := sessionEnvRun(t, b, map[string]string{"AIRLOCK_SESSION_TOKEN": s.Token}, s.ID, "--ca-out", filepath.Join(t.TempDir(), "ca.pem"))
	cmd := exec.Command(sh, "-c", stdout+"\n"+`curl -sS --fail-with-body -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.test/x`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("curl through the proxy door: %v\n%s", err, out)
	}
	brokertest.AssertNoCanary(t, "curl's answer", out)
	last := up.Last(t)
	if got := last.Header.Get("Authorization"); got != "Bearer "+brokertest.Canary {
		t.Errorf("the upstream received Authorization %q, want the real credential", got)
	}
	for _, rec := range up.Requests() {
		for _, vs := range rec.Header {
			for _, v := range vs {
				if strings.Contains(v, s.Placeholders["GITHUB_TOKEN"]) {
					t.Fatal("the placeholder reached the upstream")
				}
			}
		}
	}
}

// TestSessionEnvCreatesCAFolder: --ca-out into a folder that does not
// exist yet (the quickstart's) creates it, 0700, and writes the CA there.
func TestSessionEnvCreatesCAFolder(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := proxyBroker(t, up)
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, brokertest.TrustedSession(map[string]any{"upstream": "gh", "rules": []any{map[string]any{"method": "GET", "path": "/x"}}}))
	var s proxySession
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	folder := filepath.Join(t.TempDir(), "not", "yet")
	caOut := filepath.Join(folder, "session-ca.pem")
	stdout, _ := sessionEnvRun(t, b, map[string]string{"AIRLOCK_SESSION_TOKEN": s.Token}, s.ID, "--ca-out", caOut)
	if pem, err := os.ReadFile(caOut); err != nil || string(pem) != s.Proxy.CAPEM {
		t.Fatalf("the CA in a new folder: %v", err)
	}
	fi, err := os.Stat(folder)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("the new folder's mode %v, want 0700", fi.Mode().Perm())
	}
	if !strings.Contains(stdout, caOut) {
		t.Fatalf("the environment does not point at %s:\n%s", caOut, stdout)
	}
}
