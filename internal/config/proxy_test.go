package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProxyConfig(t *testing.T) {
	admin := env(map[string]string{"ADMIN": "0123456789abcdef0", "T": "x"})
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, testCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	up := func(name, baseURL, extra string) string {
		return "  - name: " + name + "\n    base_url: " + baseURL + "\n    credential: {source: env, name: T}\n" + extra
	}
	hostsOf := func(t *testing.T, c *Config) map[string][]string {
		t.Helper()
		ups, _, err := c.Build(admin, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for name, u := range ups {
			for _, h := range u.Hosts {
				out[name] = append(out[name], h.String())
			}
		}
		return out
	}

	t.Run("defaults", func(t *testing.T) {
		c, err := Parse([]byte("admin_token: ${ADMIN}\nupstreams:\n"+up("gh", "https://API.github.com/v3", "")+up("local", "http://127.0.0.1:9000", "")), admin)
		if err != nil {
			t.Fatal(err)
		}
		if c.ProxyListen != "" || c.Approval.ProxyWait != DefaultProxyWait {
			t.Fatalf("proxy defaults: %q %v", c.ProxyListen, c.Approval.ProxyWait)
		}
		got := hostsOf(t, c)
		if strings.Join(got["gh"], ",") != "api.github.com" || strings.Join(got["local"], ",") != "127.0.0.1:9000" {
			t.Fatalf("default hosts = %v", got)
		}
	})

	t.Run("explicit hosts and ca_cert", func(t *testing.T) {
		c, err := Parse([]byte("admin_token: ${ADMIN}\nproxy_listen: 127.0.0.1:8702\nproxy_url: broker.internal:3128\napproval: {proxy_wait: 20s}\nupstreams:\n"+
			up("gh", "https://127.0.0.1:8443", "    hosts: [api.github.test, \"*.githubusercontent.test\", \"uploads.github.test:8443\"]\n    ca_cert: "+caFile+"\n")), admin)
		if err != nil {
			t.Fatal(err)
		}
		if c.Approval.ProxyWait != 20*time.Second || c.ProxyURL != "broker.internal:3128" {
			t.Fatalf("proxy settings: %+v", c)
		}
		if got := hostsOf(t, c); strings.Join(got["gh"], ",") != "api.github.test,*.githubusercontent.test,uploads.github.test:8443" {
			t.Fatalf("hosts = %v", got)
		}
	})

	t.Run("ambiguous defaults map to no upstream", func(t *testing.T) {
		c, err := Parse([]byte("admin_token: ${ADMIN}\nupstreams:\n"+up("a", "https://api.example.com/a", "")+up("b", "https://api.example.com/b", "")+
			up("c", "https://other.example.com", "    hosts: [other.example.com]\n")), admin)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostsOf(t, c); len(got["a"]) != 0 || len(got["b"]) != 0 || strings.Join(got["c"], ",") != "other.example.com" {
			t.Fatalf("hosts = %v", got)
		}
		// A host listed explicitly wins over another upstream's default.
		c, err = Parse([]byte("admin_token: ${ADMIN}\nupstreams:\n"+up("a", "https://api.example.com/a", "")+up("b", "https://127.0.0.1:1", "    hosts: [api.example.com]\n")), admin)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostsOf(t, c); len(got["a"]) != 0 || strings.Join(got["b"], ",") != "api.example.com" {
			t.Fatalf("hosts = %v", got)
		}
	})

	for _, tc := range []struct {
		name, yaml, field string
	}{
		{"fail-host claimed twice", up("a", "https://x.test", "    hosts: [api.example.com]\n") + up("b", "https://y.test", "    hosts: [API.example.com.]\n"), "upstreams[1].hosts[0]"},
		{"fail-wildcard overlaps a host", up("a", "https://x.test", "    hosts: [\"*.example.com\"]\n") + up("b", "https://y.test", "    hosts: [api.example.com]\n"), "upstreams[1].hosts[0]"},
		{"fail-listed twice", up("a", "https://x.test", "    hosts: [a.example.com, a.example.com:443]\n"), "upstreams[0].hosts[1]"},
		{"fail-non-ascii host", up("a", "https://x.test", "    hosts: [ünï.example.com]\n"), "upstreams[0].hosts[0]"},
		{"fail-bad wildcard", up("a", "https://x.test", "    hosts: [\"*.com\"]\n"), "upstreams[0].hosts[0]"},
		{"fail-ca_cert missing", up("a", "https://x.test", "    ca_cert: /nonexistent/ca.pem\n"), "upstreams[0].ca_cert"},
		{"fail-ca_cert not PEM", up("a", "https://x.test", "    ca_cert: "+filepath.Join(dir, "..")+"\n"), "upstreams[0].ca_cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("admin_token: ${ADMIN}\nupstreams:\n"+tc.yaml), admin)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
	for _, tc := range []struct{ name, yaml, field string }{
		{"fail-proxy_listen", "proxy_listen: nope\n", "proxy_listen"},
		{"fail-proxy_listen is the sandbox plane", "proxy_listen: 127.0.0.1:8700\n", "proxy_listen"},
		{"fail-proxy_url without the door", "proxy_url: b:3128\n", "proxy_url"},
		{"fail-proxy_url with userinfo", "proxy_listen: 127.0.0.1:0\nproxy_url: u:p@b:3128\n", "proxy_url"},
		{"fail-proxy_url with scheme", "proxy_listen: 127.0.0.1:0\nproxy_url: http://b:3128\n", "proxy_url"},
		{"fail-proxy_wait negative", "approval: {proxy_wait: -1s}\n", "approval.proxy_wait"},
		{"fail-proxy_wait huge", "approval: {proxy_wait: 1h}\n", "approval.proxy_wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("admin_token: ${ADMIN}\n"+tc.yaml), admin)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// testCAPEM is a self-signed CA certificate (only parsed, never trusted).
func testCAPEM(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock config test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
