package brokertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// MinterContract is the lifecycle every credential minted per session must
// keep (issue 15), run on a real broker with a fake clock against any
// upstream.Minter, fake or real: one mint for concurrent first calls, the
// lease injected and scrubbed from answers, renewal at 2/3 of its life, a
// new mint when the grants change (the old lease revoked), and every lease
// revoked when its session is killed, expires or the kill-switch is
// engaged.
type MinterContract struct {
	Minter upstream.Minter
	// Start is the fake clock's start (the real issuer's time for a real
	// source: leases are judged by the broker's clock).
	Start time.Time
	// Upstream is the upstream under test around base (the contract's echo
	// server); the contract sets its Minter and Source.
	Upstream func(base *url.URL) *upstream.Upstream
	// Grant allows Request; Grant2 is a second grant on the same upstream
	// (the session's scope changes when it is added).
	Grant, Grant2 grants.Spec
	Request       func() *broker.Request
	// Gone reports whether the issuer no longer honours a revoked lease
	// (nil: the Revoke call's success is trusted).
	Gone func(ctx context.Context, l upstream.Lease) bool
	// SkipRenew: the source's leases do not expire on the broker's clock.
	SkipRenew bool
}

// recorder wraps the Minter under test and records what the broker asked.
type recorder struct {
	m upstream.Minter

	mu      sync.Mutex
	mints   int
	renews  int
	leases  []upstream.Lease
	revoked []upstream.Lease
	errs    []string      // revocations that failed
	changed chan struct{} // a revocation happened
}

func (r *recorder) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	l, err := r.m.Mint(ctx, sc)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mints++
	if err == nil {
		r.leases = append(r.leases, l)
	}
	return l, err
}

func (r *recorder) Renew(ctx context.Context, sc upstream.Scope, old upstream.Lease) (upstream.Lease, error) {
	l, err := r.m.Renew(ctx, sc, old)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews++
	if err == nil && l.ID != old.ID {
		r.leases = append(r.leases, l)
	}
	return l, err
}

func (r *recorder) Revoke(ctx context.Context, l upstream.Lease) error {
	err := r.m.Revoke(ctx, l)
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err.Error())
		r.mu.Unlock()
	}
	if err == nil {
		r.mu.Lock()
		r.revoked = append(r.revoked, l)
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	return err
}

func (r *recorder) Describe() string { return r.m.Describe() }

func (r *recorder) counts() (mints, renews int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mints, r.renews
}

func (r *recorder) last() upstream.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases[len(r.leases)-1]
}

func (r *recorder) isRevoked(l upstream.Lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.revoked {
		if x.ID == l.ID && x.Secret.Reveal() == l.Secret.Reveal() {
			return true
		}
	}
	return false
}

// waitRevoked waits (on the recorder's signal, bounded by 10 s of wall
// clock) until every lease given is revoked.
func (r *recorder) waitRevoked(t *testing.T, ls ...upstream.Lease) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		all := true
		for _, l := range ls {
			all = all && r.isRevoked(l)
		}
		if all {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("leases not revoked in time (failed revocations: %q)", r.errs)
		}
	}
}

// Run runs the contract.
func (c MinterContract) Run(t *testing.T) {
	t.Helper()
	rec := &recorder{m: c.Minter, changed: make(chan struct{}, 1)}
	var sawMu sync.Mutex
	var saw []string // what the upstream received as credentials
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawMu.Lock()
		saw = append(saw, r.Header.Get("Authorization")+" "+r.Header.Get("X-Amz-Security-Token")+" "+r.URL.RawQuery)
		sawMu.Unlock()
		// The answer repeats what was injected: the scrubber must remove it.
		_, _ = io.WriteString(w, "auth="+r.Header.Get("Authorization")+" token="+r.Header.Get("X-Amz-Security-Token")+" q="+r.URL.RawQuery)
	}))
	t.Cleanup(echo.Close)
	base, _ := url.Parse(echo.URL)
	u := c.Upstream(base)
	u.Minter, u.Source = rec, upstream.MintedSource(rec)
	u.SetTransport(upstream.NewTransport())
	k := MustOpenBroker(t, WithFakeClock(c.Start), WithUpstream(u))
	b, ctx := k.Broker, context.Background()
	op := auth.Principal{ID: "op", Role: auth.RoleOperator}
	no := false
	newSession := func(ttl time.Duration) sessions.SessionView {
		t.Helper()
		v, err := b.CreateSession(ctx, op, sessions.SessionRequest{TaskID: "mint", TTL: ttl, Isolation: "microvm", UntrustedInput: &no, Grants: []grants.Spec{c.Grant}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	call := func(v sessions.SessionView) (string, error) {
		res := Do(ctx, b, broker.Inbound{Upstream: u.Name, Method: c.Request().Method,
			Caller: broker.BearerCaller(v.Token, netip.MustParseAddr("127.0.0.1")), Parse: Request(c.Request())})
		if res.Held {
			t.Fatal("the contract's grant must not be gated")
		}
		return res.Body, res.Err
	}
	mustCall := func(v sessions.SessionView) string {
		t.Helper()
		body, err := call(v)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	noValue := func(body string, ls ...upstream.Lease) {
		t.Helper()
		for _, l := range ls {
			for _, v := range u.LeaseValues(l) {
				if strings.Contains(body, v) {
					t.Fatalf("an answer carried a minted value")
				}
			}
		}
	}

	// Concurrent first calls wait on one mint; the lease is injected and
	// scrubbed from the answer.
	v := newSession(30 * time.Minute)
	var wg sync.WaitGroup
	bodies := make([]string, 4)
	errs := make([]error, 4)
	for i := range bodies {
		wg.Add(1)
		go func() { defer wg.Done(); bodies[i], errs[i] = call(v) }()
	}
	wg.Wait()
	for i := range bodies {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	if m, _ := rec.counts(); m != 1 {
		t.Fatalf("concurrent first calls minted %d times, want 1", m)
	}
	first := rec.last()
	for _, body := range bodies {
		noValue(body, first)
	}
	sawMu.Lock()
	if len(saw) != 4 {
		t.Fatalf("upstream saw %d calls, want 4", len(saw))
	}
	for _, s := range saw { // the call was made with the minted credential
		ok := strings.Contains(s, first.Secret.Reveal())
		if first.AWS.AccessKeyID != "" {
			ok = strings.Contains(s, "Credential="+first.AWS.AccessKeyID+"/") && strings.Contains(s, first.AWS.SessionToken)
		}
		if !ok {
			t.Fatalf("the upstream did not receive the minted credential")
		}
	}
	sawMu.Unlock()

	// Renewal once 2/3 of the lease's life has passed, not before.
	if !c.SkipRenew && !first.Expires.IsZero() && first.Expires.Before(v.Session.ExpiresAt) {
		life := first.Expires.Sub(k.Clock.Now())
		k.Clock.Advance(life / 2)
		noValue(mustCall(v), first)
		if _, r := rec.counts(); r != 0 {
			t.Fatalf("renewed at half the lease's life")
		}
		k.Clock.Advance(life/6 + time.Second)
		noValue(mustCall(v), first, rec.last())
		if _, r := rec.counts(); r != 1 {
			t.Fatalf("renewals after 2/3 of the lease's life: %d, want 1", r)
		}
	}

	// A grant added changes the scope: minted anew, the old lease revoked,
	// its values still scrubbed (rotation grace).
	before := rec.last()
	mintsBefore, _ := rec.counts()
	if _, err := b.AddGrant(ctx, op, v.Session.ID, c.Grant2); err != nil {
		t.Fatal(err)
	}
	noValue(mustCall(v), before)
	if m, _ := rec.counts(); m != mintsBefore+1 {
		t.Fatalf("a new grant did not re-mint: %d mints", m)
	}
	rec.waitRevoked(t, before)
	current := rec.last()

	// Killing the session revokes its lease.
	if _, err := b.KillSession(ctx, op, v.Session.ID); err != nil {
		t.Fatal(err)
	}
	rec.waitRevoked(t, current)
	if c.Gone != nil && !c.Gone(ctx, current) {
		t.Fatal("the issuer still honours a killed session's lease")
	}
	if _, err := call(v); err == nil {
		t.Fatal("a killed session's call went through")
	}

	// The session's expiry revokes its lease (a timer on the broker's clock).
	short := newSession(2 * time.Minute)
	mustCall(short)
	expiring := rec.last()
	k.Clock.Advance(2 * time.Minute)
	rec.waitRevoked(t, expiring)
	if c.Gone != nil && !c.Gone(ctx, expiring) {
		t.Fatal("the issuer still honours an expired session's lease")
	}

	// The kill-switch revokes every session's lease.
	s1, s2 := newSession(10*time.Minute), newSession(10*time.Minute)
	mustCall(s1)
	l1 := rec.last()
	mustCall(s2)
	l2 := rec.last()
	if _, err := b.SetKillswitch(ctx, auth.Principal{ID: "admin", Role: auth.RoleAdmin}, true, "contract"); err != nil {
		t.Fatal(err)
	}
	rec.waitRevoked(t, l1, l2)
}
