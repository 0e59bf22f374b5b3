package proxyca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func mustCA(t *testing.T, id string, ttl time.Duration) (*CA, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: t0}
	ca, err := New(id, t0.Add(ttl), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return ca, clk
}

func mustSealer(t *testing.T, b byte) *Sealer {
	t.Helper()
	s, err := NewSealer(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verify(ca *CA, leaf *tls.Certificate, host string, at time.Time) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	_, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func TestCACertificate(t *testing.T) {
	ca, _ := mustCA(t, "ses_abc", time.Hour)
	c := ca.Certificate()
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("not a path-length-0 CA: IsCA %v MaxPathLen %d zero %v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	if !strings.Contains(c.Subject.CommonName, "ses_abc") {
		t.Errorf("subject %q does not name the session", c.Subject)
	}
	if !c.NotAfter.Equal(t0.Add(time.Hour)) {
		t.Errorf("NotAfter %v, want the session expiry %v", c.NotAfter, t0.Add(time.Hour))
	}
	if !c.NotBefore.Equal(t0.Add(-time.Minute)) {
		t.Errorf("NotBefore %v, want a minute back", c.NotBefore)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 || len(c.SubjectKeyId) == 0 {
		t.Errorf("CA lacks certSign key usage or a subject key id")
	}
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 || !bytes.Equal(block.Bytes, ca.CertDER()) {
		t.Errorf("CertPEM is not the one certificate")
	}
	if _, err := New("ses_x", t0, func() time.Time { return t0 }); err == nil {
		t.Error("a CA that expires now was made")
	}
}

func TestLeaf(t *testing.T) {
	ca, clk := mustCA(t, "ses_abc", time.Hour)
	leaf, err := ca.Leaf("API.GitHub.test.")
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, leaf, "api.github.test", t0); err != nil {
		t.Errorf("leaf does not verify for its host: %v", err)
	}
	if leaf.Leaf.NotAfter.After(ca.Certificate().NotAfter) {
		t.Errorf("leaf outlives the CA: %v > %v", leaf.Leaf.NotAfter, ca.Certificate().NotAfter)
	}
	if leaf.Leaf.IsCA || len(leaf.Leaf.ExtKeyUsage) != 1 || leaf.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("leaf: IsCA %v ExtKeyUsage %v", leaf.Leaf.IsCA, leaf.Leaf.ExtKeyUsage)
	}
	if len(leaf.Certificate) != 2 || !bytes.Equal(leaf.Certificate[1], ca.CertDER()) {
		t.Error("leaf chain does not carry the CA")
	}
	if err := verify(ca, leaf, "evil.test", t0); err == nil {
		t.Error("leaf for api.github.test verifies for evil.test")
	}
	other, err := ca.Leaf("evil.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, other, "api.github.test", t0); err == nil {
		t.Error("leaf for evil.test verifies for api.github.test")
	}
	again, _ := ca.Leaf("api.github.test")
	if again != leaf {
		t.Error("leaf not cached")
	}
	ip, err := ca.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ip.Leaf.IPAddresses) != 1 || len(ip.Leaf.DNSNames) != 0 {
		t.Errorf("IP leaf SANs: %v %v", ip.Leaf.IPAddresses, ip.Leaf.DNSNames)
	}
	ca2, _ := mustCA(t, "ses_other", time.Hour)
	if err := verify(ca2, leaf, "api.github.test", t0); err == nil {
		t.Error("a leaf of one session's CA verifies under another session's CA")
	}
	if err := verify(ca, leaf, "api.github.test", t0.Add(time.Hour+time.Second)); err == nil {
		t.Error("leaf verifies after the session expired")
	}
	clk.Add(time.Hour)
	if _, err := ca.Leaf("new.test"); !errors.Is(err, ErrExpired) {
		t.Errorf("leaf of an expired CA: %v, want ErrExpired", err)
	}
}

func TestLeafBadHosts(t *testing.T) {
	ca, _ := mustCA(t, "ses_abc", time.Hour)
	for _, h := range []string{"", ".", "a..b", "*.github.test", "api.github.test:443", "bücher.test",
		"-a.test", "a b.test", "a/b", "fe80::1%eth0", strings.Repeat("a", 64) + ".test", "a\x00b"} {
		if _, err := ca.Leaf(h); !errors.Is(err, ErrBadHost) {
			t.Errorf("Leaf(%q) = %v, want ErrBadHost", h, err)
		}
	}
}

func TestLeafConcurrentFirstUseIssuesOnce(t *testing.T) {
	ca, _ := mustCA(t, "ses_abc", time.Hour)
	const n = 32
	got := make([]*tls.Certificate, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = ca.Leaf("api.github.test")
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] == nil || got[i] != got[0] {
			t.Fatalf("caller %d got another leaf", i)
		}
	}
}

func TestLeafCacheBounded(t *testing.T) {
	ca, _ := mustCA(t, "ses_abc", time.Hour)
	first, _ := ca.Leaf("h0.test")
	for i := 1; i <= MaxLeaves; i++ {
		if _, err := ca.Leaf("h" + strconv.Itoa(i) + ".test"); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	n, order := len(ca.leaves), len(ca.order)
	ca.mu.Unlock()
	if n != MaxLeaves || order != MaxLeaves {
		t.Errorf("cache holds %d (order %d), want %d", n, order, MaxLeaves)
	}
	if again, _ := ca.Leaf("h0.test"); again == first {
		t.Error("the oldest leaf was not evicted")
	}
}

func TestSealOpen(t *testing.T) {
	ca, clk := mustCA(t, "ses_abc", time.Hour)
	s := mustSealer(t, 1)
	sealed, err := s.Seal(ca)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, ca.key.D.Bytes()) || bytes.Contains(sealed, keyDER[:16]) {
		t.Error("the sealed blob carries the private key in the clear")
	}
	opened, err := s.Open("ses_abc", ca.CertDER(), sealed, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := opened.Leaf("api.github.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, leaf, "api.github.test", t0); err != nil {
		t.Errorf("a leaf of the reopened CA does not verify under the original CA: %v", err)
	}

	other, _ := mustCA(t, "ses_other", time.Hour)
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-5] ^= 1
	badVersion := bytes.Clone(sealed)
	badVersion[0] = 9
	for _, tc := range []struct {
		name    string
		sealer  *Sealer
		session string
		cert    []byte
		sealed  []byte
	}{
		{"another session id", s, "ses_other", ca.CertDER(), sealed},
		{"another installation secret", mustSealer(t, 2), "ses_abc", ca.CertDER(), sealed},
		{"tampered ciphertext", s, "ses_abc", ca.CertDER(), tampered},
		{"another certificate beside it", s, "ses_abc", other.CertDER(), sealed},
		{"unknown version", s, "ses_abc", ca.CertDER(), badVersion},
		{"truncated", s, "ses_abc", ca.CertDER(), sealed[:10]},
		{"empty", s, "ses_abc", ca.CertDER(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.sealer.Open(tc.session, tc.cert, tc.sealed, clk.Now); !errors.Is(err, ErrSealed) {
				t.Errorf("Open = %v, want ErrSealed", err)
			}
		})
	}
}

// TestLeafServesTLS: a stock Go TLS client that trusts only the CA
// reaches a server presenting the leaf for the host it dialled.
func TestLeafServesTLS(t *testing.T) {
	ca, err := New("ses_abc", time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(h.ServerName) }}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	// "localhost" resolves locally; the leaf is issued for the SNI.
	resp, err := c.Get("https://localhost:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// BenchmarkNew is making a session's CA; BenchmarkLeaf issuing a leaf
// (first use of a host) and serving it from the cache; BenchmarkOpen
// unsealing a stored CA (first use after a restart).
func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		if _, err := New("ses_bench", time.Now().Add(time.Hour), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeaf(b *testing.B) {
	ca, err := New("ses_bench", time.Now().Add(time.Hour), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("issue", func(b *testing.B) {
		for b.Loop() {
			if _, err := ca.issue("api.github.test", time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ca.Leaf("api.github.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkOpen(b *testing.B) {
	ca, err := New("ses_bench", time.Now().Add(time.Hour), nil)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := NewSealer(bytes.Repeat([]byte{1}, 32))
	sealed, _ := s.Seal(ca)
	for b.Loop() {
		if _, err := s.Open("ses_bench", ca.CertDER(), sealed, nil); err != nil {
			b.Fatal(err)
		}
	}
}
