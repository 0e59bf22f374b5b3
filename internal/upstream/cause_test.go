package upstream

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

const causeCanary = "CANARY-cause-query-secret"

// TestRoundTripCauses: a failed round trip is an error of its kind whose
// cause is a fixed phrase for what failed (one row per failure the
// process test cannot set up: a dial that times out, an expired
// certificate, a connection closed before the answer, an answer cut short
// or that does not decode), and no error's text names the host or the
// query credential.
func TestRoundTripCauses(t *testing.T) {
	expired := expiredTLSServer(t)
	closing := serveConn(t, func(c net.Conn) { _, _ = http.ReadRequest(bufio.NewReader(c)); c.Close() })
	short := serveConn(t, func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
		c.Close()
	})
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, "not gzip at all")
	}))
	t.Cleanup(garbled.Close)
	brotli := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
	}))
	t.Cleanup(brotli.Close)

	stalledDial := NewTransport()
	stalledDial.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	trusting := NewTransport()
	trusting.TLSClientConfig = &tls.Config{RootCAs: expired.pool}

	tests := []struct {
		name      string
		base      string
		transport http.RoundTripper
		readBody  bool // the failure is in reading the answer
		want      error
		cause     string
	}{
		{name: "dial timeout", base: "http://192.0.2.1", transport: stalledDial, want: ErrTimeout, cause: "upstream timed out connecting"},
		{name: "expired certificate", base: expired.url, transport: trusting, want: ErrUpstream, cause: "TLS: certificate expired or not yet valid"},
		{name: "closed before answering", base: "http://" + closing, want: ErrUpstream, cause: "the upstream closed the connection before answering"},
		{name: "unknown encoding", base: brotli.URL, want: ErrUpstream, cause: "the upstream's answer has a content encoding the broker cannot decode"},
		{name: "answer cut short", base: "http://" + short, readBody: true, want: ErrUpstream, cause: "the upstream's answer was cut short"},
		{name: "answer does not decode", base: garbled.URL, readBody: true, want: ErrUpstream, cause: "the upstream's answer does not decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := url.Parse(tt.base)
			u := &Upstream{Name: "api", BaseURL: base, Timeout: time.Second, Inject: Injection{Query: "api_key"}}
			if tt.transport == nil {
				tt.transport = NewTransport()
			}
			u.SetTransport(tt.transport)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			resp, err := u.Do(ctx, &Outbound{Method: "GET", Path: "/x", Header: http.Header{}}, Credential{Secret: NewSecret(causeCanary)})
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if !tt.readBody {
					t.Fatalf("the round trip succeeded (read: %v)", err)
				}
				err = ReadFailed(err)
			} else if tt.readBody {
				t.Fatalf("round trip: %v", err)
			}
			if !errors.Is(err, tt.want) || fault.Of(err) != fault.Of(tt.want) {
				t.Fatalf("error %v (kind %v), want one of %v", err, fault.Of(err), tt.want)
			}
			if got := fault.CauseOf(err); got != tt.cause {
				t.Fatalf("cause %q, want %q (error: %v)", got, tt.cause, err)
			}
			for _, leak := range []string{causeCanary, base.Hostname(), "api_key"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("the error's text names %q: %v", leak, err)
				}
			}
		})
	}
}

// TestNetCauseNamesWho: the issuer's and Vault's round trips are told
// with their own subject.
func TestNetCauseNamesWho(t *testing.T) {
	lookup := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "vault.internal", IsNotFound: true}}
	if got, want := NetCause(lookup, WhoVault), "DNS: the Vault server's host name was not found"; got != want {
		t.Errorf("NetCause = %q, want %q", got, want)
	}
	if got, want := NetCause(&url.Error{Op: "Post", URL: "https://issuer/token?secret=x", Err: context.DeadlineExceeded}, WhoIssuer), "issuer timed out"; got != want {
		t.Errorf("NetCause = %q, want %q", got, want)
	}
}

type tlsFixture struct {
	url  string
	pool *x509.CertPool
}

// expiredTLSServer is a TLS server whose certificate (its own CA)
// expired yesterday.
func expiredTLSServer(t *testing.T) tlsFixture {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return tlsFixture{url: srv.URL, pool: pool}
}

// serveConn is a loopback address whose server hands each connection to
// handle.
func serveConn(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}
