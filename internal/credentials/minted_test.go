package credentials_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/credentials"
)

// Every mint, renewal and revocation is audited under the session with the
// lease id only as an HMAC, never a value, and counted in /metrics.
func TestMintedAuditAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := mustService(t, &fakeMinter{revoked: map[string]bool{}}, reg)
	f.credential(t)
	f.clk.Advance(45 * time.Second) // past 2/3 of the minute's lease
	f.credential(t)
	f.svc.EndSession(f.sess.id, "session killed")
	f.svc.Close() // waits for the revocation
	want := map[string]bool{"credential.minted": false, "credential.renewed": false, "credential.revoked": false}
	for _, ev := range f.audit.events() {
		if strings.Contains(ev.Reason, "lease-1") || strings.Contains(ev.Reason, "minted-secret") {
			t.Fatalf("an audit record carries a lease id or a minted value: %+v", ev)
		}
		if _, ok := want[ev.Type]; ok && ev.SessionID == f.sess.id && ev.Upstream == "api" && strings.Contains(ev.Reason, hmacOf("lease-1")) {
			want[ev.Type] = true
		}
	}
	for typ, seen := range want {
		if !seen {
			t.Errorf("no %s record of lease-1 (all: %+v)", typ, f.audit.events())
		}
	}
	got := map[string]float64{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "airlock_credential_mints_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	for _, k := range []string{"op=mint,result=ok,upstream=api,", "op=renew,result=ok,upstream=api,", "op=revoke,result=ok,upstream=api,"} {
		if got[k] != 1 {
			t.Errorf("airlock_credential_mints_total{%s} = %v, want 1 (all: %v)", k, got[k], got)
		}
	}
}

// A renewal that fails while the lease is still valid keeps the lease in
// use and is retried after a pause, not on every call: an issuer outage
// costs one attempt (and one credential.failed record) per pause per
// session, not one per call.
func TestMintRenewalFailureBacksOff(t *testing.T) {
	m := &failingRenewMinter{fakeMinter: fakeMinter{revoked: map[string]bool{}}}
	f := mustService(t, m, nil)
	f.credential(t)                 // mints a lease of a minute
	f.clk.Advance(45 * time.Second) // past 2/3 of its life
	for range 5 {
		f.credential(t)
	}
	if n := m.renews.Load(); n != 1 {
		t.Fatalf("%d renewal attempts during 5 calls, want 1 (then a pause)", n)
	}
	f.clk.Advance(8 * time.Second) // the pause (half the 15 s left) has passed
	f.credential(t)
	if n := m.renews.Load(); n != 2 {
		t.Fatalf("%d renewal attempts after the pause, want 2", n)
	}
}

// A change of the session's grants on the upstream revokes the lease minted
// for the old ones at once, without a call; the next call mints one for the
// grants the session holds then. The session's expiry revokes its lease by
// the clock.
func TestMintRescopeAndExpiry(t *testing.T) {
	m := &fakeMinter{revoked: map[string]bool{}}
	f := mustService(t, m, nil)
	first := f.credential(t)
	f.sess.addGrant("gr_2", "/other")
	f.svc.Rescope(f.sess.id, "api")
	eventually(t, func() bool { return m.isRevoked("lease-1") })
	second := f.credential(t)
	if second.Secret.Reveal() == first.Secret.Reveal() {
		t.Fatal("no new lease for the grants the session holds now")
	}
	// The old lease's value is still scrubbed (rotation grace).
	if out := second.Scrub.String(first.Secret.Reveal()); strings.Contains(out, first.Secret.Reveal()) {
		t.Fatalf("the replaced lease's value is not scrubbed: %q", out)
	}
	f.clk.Advance(time.Hour) // the session's expiry
	eventually(t, func() bool { return m.isRevoked("lease-2") })
}

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		<-time.After(2 * time.Millisecond)
	}
}

// BenchmarkMintedCredential is what a minted credential costs a call: a
// hit (the session's lease, current) and a miss (a mint by a Minter that
// answers at once, the scrubber built: the issuer's own latency comes on top).
func BenchmarkMintedCredential(b *testing.B) {
	f := mustService(b, &fakeMinter{revoked: map[string]bool{}}, nil)
	ctx := context.Background()
	b.Run("hit", func(b *testing.B) {
		f.credential(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.svc.Credential(ctx, f.sess, f.up); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			credentials.ForgetMinted(f.svc, f.sess.id)
			if _, err := f.svc.Credential(ctx, f.sess, f.up); err != nil {
				b.Fatal(err)
			}
		}
	})
}
