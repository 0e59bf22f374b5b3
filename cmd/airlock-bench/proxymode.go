// Proxy mode (DESIGN §8): the sandbox's client reaches the upstream by its
// own name through HTTPS_PROXY, TLS inside the tunnel, trusting the
// session's CA; and its baseline, a bare TLS-terminating forward proxy
// (CONNECT, a leaf from its own CA, the same httputil.ReverseProxy).

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// proxyHost is the name the proxy-mode client calls the upstream by; the
// broker's `api` upstream lists it in `hosts`, and no resolver is asked:
// the client sends it in CONNECT, the proxies dial their configured target.
const proxyHost = "api.bench.test"

// proxyVariant is the proxy-mode point: GET /items, as "allowed GET" does
// through the REST door.
const proxyVariant = "proxy mode GET, TLS inside the tunnel"

// proxyClient is a sandbox's client in proxy mode: every request through
// proxy (the session token as the proxy password), HTTP/1.1 with keep-alive
// inside the tunnel, trusting only caPEM.
func proxyClient(proxy *url.URL, caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("proxy mode: no certificate in the CA PEM")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
	}}, nil
}

// sessionProxy is the proxy part of a session's answer.
type sessionProxy struct {
	URL   string `json:"url"`
	CAPEM string `json:"ca_pem"`
}

// proxyURL is the session's HTTPS_PROXY: the answer's URL, with the
// session token as the password when the URL carries none.
func (p sessionProxy) proxyURL(token string) (*url.URL, error) {
	u, err := url.Parse(p.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("proxy mode: the session's proxy.url %q is not a URL", p.URL)
	}
	if u.User == nil {
		u.User = url.UserPassword("airlock", token)
	}
	return u, nil
}

// mitm terminates TLS for proxyHost inside CONNECT tunnels: the bare
// proxy's share of what the broker's proxy door does. Its leaf is issued
// once (the broker caches its leaves per host too).
type mitm struct {
	caPEM []byte
	tls   *tls.Config
	conns chan net.Conn // TLS connections, served by one http.Server
	done  chan struct{}
	once  sync.Once
}

func newMITM() (*mitm, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock-bench bare proxy CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: proxyHost}, DNSNames: []string{proxyHost},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leaf, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return &mitm{
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls:   &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf}, PrivateKey: key}}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		conns: make(chan net.Conn), done: make(chan struct{}),
	}, nil
}

// handler answers CONNECT to proxyHost:443 by terminating TLS and handing
// the connection to the server of Accept; anything else goes to next.
func (m *mitm) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			next.ServeHTTP(w, r)
			return
		}
		if r.Host != proxyHost+":443" {
			http.Error(w, "no such destination", http.StatusForbidden)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if rw.Reader.Buffered() > 0 { // a client never speaks before the 200
			conn.Close()
			return
		}
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			conn.Close()
			return
		}
		select {
		case m.conns <- tls.Server(conn, m.tls):
		case <-m.done:
			conn.Close()
		}
	})
}

// Accept, Close and Addr make m the listener of the tunnels' server.
func (m *mitm) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *mitm) Close() error {
	m.once.Do(func() { close(m.done) })
	return nil
}

func (m *mitm) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// proxyTable sets proxy mode beside the REST door and the bare proxies, at
// each durability and concurrency measured.
func (r *report) proxyTable() string {
	var b strings.Builder
	paths := []struct{ name, target, variant string }{
		{"bare reverse proxy (plain HTTP)", "bare proxy", "allowed GET"},
		{"REST door `/v1/proxy/api/items`", "broker", "allowed GET"},
		{"bare TLS-terminating proxy (CONNECT)", "bare proxy", proxyVariant},
		{"proxy door (`HTTPS_PROXY`, CONNECT, session CA)", "broker", proxyVariant},
	}
	for _, x := range r.results {
		if x.Target != "broker" || x.Variant != proxyVariant {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n## Proxy mode beside the REST door\n\nThe same GET of the same upstream: by URL rewriting (REST door), and by the upstream's own name through `HTTPS_PROXY` ")
			b.WriteString("with TLS inside the tunnel, keep-alive, the client trusting the session's CA (proxy door). Each beside its bare baseline; ratio: req/s against the bare reverse proxy.\n\n")
			b.WriteString("| durability | callers | path | req/s | ratio | p50 | p99 | CPU/call | errors |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		ref, _ := r.find("bare proxy", "allowed GET", x.Durability, x.Concurrency)
		for _, p := range paths {
			y, ok := r.find(p.target, p.variant, x.Durability, x.Concurrency)
			if !ok {
				continue
			}
			ratio := "—"
			if ref.RPS > 0 {
				ratio = fmt.Sprintf("%.2f", y.RPS/ref.RPS)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %s | %s | %s | %s | %d |\n", x.Durability, x.Concurrency, p.name, y.RPS, ratio, ms(y.P50), ms(y.P99), y.cpuPerCall(), y.Errors)
		}
	}
	return b.String()
}
