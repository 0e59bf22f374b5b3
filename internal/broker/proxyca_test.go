package broker_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

func withProxyCA(o *broker.Options) { o.ProxyCA = true }

// verifyLeaf checks that the leaf ProxyLeaf issued for host chains to caPEM.
func verifyLeaf(t *testing.T, b *broker.Broker, caPEM []byte, sessionID, host string) {
	t.Helper()
	leaf, err := b.ProxyLeaf(sessionID, host)
	if err != nil {
		t.Fatalf("ProxyLeaf(%s, %s): %v", sessionID, host, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: b.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("leaf for %s does not verify under the session CA: %v", host, err)
	}
}

// TestProxyCASurvivesRestart: the CA made with a session is stored sealed,
// served again by a broker restarted on the same bbolt file, and by two
// brokers over one store at once; it dies with the session.
func TestProxyCASurvivesRestart(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "airlock.db")
	st1, err := boltstore.OpenBolt(path, store.DurabilityBuffered, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	k1 := brokertest.MustOpenBroker(t, brokertest.WithStore(st1), brokertest.WithClock(clk), brokertest.WithOptions(withProxyCA))
	v, err := k1.Broker.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", TTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := v.Session.ID
	if len(v.ProxyCAPEM) == 0 {
		t.Fatal("the creation answer has no CA")
	}
	block, _ := pem.Decode(v.ProxyCAPEM)
	caCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if caCert.NotAfter.After(v.Session.ExpiresAt) {
		t.Errorf("CA NotAfter %v outlives the session (%v)", caCert.NotAfter, v.Session.ExpiresAt)
	}
	verifyLeaf(t, k1.Broker, v.ProxyCAPEM, id, "api.github.test")
	k1.Close()
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}

	st2, err := boltstore.OpenBolt(path, store.DurabilityBuffered, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st2.Close() })
	ka := brokertest.MustOpenBroker(t, brokertest.WithStore(st2), brokertest.WithClock(clk), brokertest.WithOptions(withProxyCA))
	kb := brokertest.MustOpenBroker(t, brokertest.WithStore(st2), brokertest.WithClock(clk), brokertest.WithOptions(withProxyCA))
	for name, b := range map[string]*broker.Broker{"restarted": ka.Broker, "second": kb.Broker} {
		t.Run(name, func(t *testing.T) {
			pemAgain, err := b.SessionCA(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(pemAgain, v.ProxyCAPEM) {
				t.Error("another CA after the restart")
			}
			verifyLeaf(t, b, v.ProxyCAPEM, id, "api.github.test")
			verifyLeaf(t, b, v.ProxyCAPEM, id, "127.0.0.1")
		})
	}

	if _, err := ka.Broker.KillSession(ctx, operator, id); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Broker.ProxyLeaf(id, "api.github.test"); !errors.Is(err, session.ErrRevoked) {
		t.Errorf("ProxyLeaf of a killed session: %v, want ErrRevoked", err)
	}
	// The certificate stays readable (public) after the session is over.
	if _, err := ka.Broker.SessionCA(ctx, id); err != nil {
		t.Errorf("SessionCA of a killed session: %v", err)
	}
	ka.Close()
	kc := brokertest.MustOpenBroker(t, brokertest.WithStore(st2), brokertest.WithClock(clk), brokertest.WithOptions(withProxyCA))
	if _, err := kc.Broker.ProxyLeaf(id, "api.github.test"); !errors.Is(err, session.ErrRevoked) {
		t.Errorf("ProxyLeaf of a killed session after a restart: %v, want ErrRevoked", err)
	}
}

func TestProxyLeafRefusals(t *testing.T) {
	ctx := context.Background()
	k := brokertest.MustOpenBroker(t, brokertest.WithFakeClock(t0), brokertest.WithOptions(withProxyCA))
	b := k.Broker
	v, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ProxyLeaf(v.Session.ID, "bad host"); !errors.Is(err, proxyca.ErrBadHost) {
		t.Errorf("bad host: %v", err)
	}
	if _, err := b.ProxyLeaf("ses_unknown", "api.github.test"); !errors.Is(err, session.ErrInvalidToken) {
		t.Errorf("unknown session: %v", err)
	}
	if _, err := b.SessionCA(ctx, "ses_unknown"); !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("SessionCA of an unknown session: %v", err)
	}
	k.Clock.Advance(time.Minute)
	if _, err := b.ProxyLeaf(v.Session.ID, "api.github.test"); !errors.Is(err, session.ErrExpired) {
		t.Errorf("expired session: %v, want ErrExpired", err)
	}

	// Without the proxy door a session has no CA.
	off := brokertest.MustOpenBroker(t, brokertest.WithFakeClock(t0)).Broker
	w, err := off.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if w.ProxyCAPEM != nil || w.Session.ProxyCA != nil {
		t.Error("a CA was made with the proxy door off")
	}
	if _, err := off.ProxyLeaf(w.Session.ID, "api.github.test"); !errors.Is(err, broker.ErrNoProxyCA) {
		t.Errorf("ProxyLeaf without a CA: %v", err)
	}
	if _, err := off.SessionCA(ctx, w.Session.ID); !errors.Is(err, broker.ErrNoProxyCA) || !errors.Is(err, broker.ErrNotFound) {
		t.Errorf("SessionCA without a CA: %v, want ErrNoProxyCA (an ErrNotFound)", err)
	}
}

// BenchmarkCreateSessionProxyCA is BenchmarkCreateSession's durable
// session creation (fsync) with the proxy door's CA (key generation,
// self-signing, sealing) and a placeholder, beside the same without.
func BenchmarkCreateSessionProxyCA(b *testing.B) {
	for _, ca := range []bool{false, true} {
		b.Run(map[bool]string{false: "no-ca", true: "proxy-ca"}[ca], func(b *testing.B) {
			br := payBroker(b, brokertest.WithDurability(store.DurabilityFsync), brokertest.WithNow(time.Now),
				brokertest.WithOptions(func(o *broker.Options) { o.ProxyCA = ca })).Broker
			req := sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false), Grants: []grants.Spec{paymentGrant()}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := br.CreateSession(context.Background(), operator, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
