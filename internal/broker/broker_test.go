package broker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/upstream"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// payBroker is the kit's broker with this package's usual setup: the
// unreachable sensitive upstream "pay" and isolation enforced.
func payBroker(tb testing.TB, opts ...brokertest.Option) *brokertest.Kit {
	tb.Helper()
	opts = append([]brokertest.Option{brokertest.WithUpstream(brokertest.Unreachable("pay")),
		brokertest.WithOptions(func(o *broker.Options) { o.EnforceIsolation = true })}, opts...)
	return brokertest.MustOpenBroker(tb, opts...)
}

var operator = auth.Principal{ID: "op", Role: auth.RoleOperator}

func ptr[T any](v T) *T { return &v }

func paymentGrant() grants.Spec {
	return grants.Spec{Upstream: "pay", Rules: []grants.Rule{{Method: "POST", Path: "/accounts/{account}/payments", DenyUnknown: true,
		Constraints: map[string]grants.Constraint{
			"path.account":  {Pin: "acct-1"},
			"body.to":       {Pin: "acme"},
			"body.amount":   {Min: ptr(1.0), Max: ptr(100.0), Required: true},
			"body.currency": {OneOf: []any{"EUR", "USD"}},
		}}}}
}

func TestSessionExpiryAndIsolation(t *testing.T) {
	k := payBroker(t, brokertest.WithFakeClock(t0))
	b := k.Broker
	ctx := context.Background()
	// Untrusted input + a sensitive upstream needs a microVM.
	_, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", Isolation: "container", Grants: []grants.Spec{paymentGrant()}})
	if !errors.Is(err, session.ErrIsolationWeak) {
		t.Fatalf("weak isolation: %v", err)
	}
	v, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", TTL: time.Minute, Isolation: "microvm", UntrustedInput: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	// A grant that raises the required tier past the declared one is refused too.
	weak, _ := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", Isolation: "gvisor"})
	if _, err := b.AddGrant(ctx, operator, weak.Session.ID, paymentGrant()); !errors.Is(err, session.ErrIsolationWeak) {
		t.Fatalf("grant raising the tier: %v", err)
	}
	k.Clock.Advance(time.Minute)
	if _, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1")); !errors.Is(err, session.ErrExpired) {
		t.Fatalf("after the TTL: %v", err)
	}
}

// BenchmarkAuthorize is the hot-path authorization decision: token →
// session (from memory) → grant rule → every constraint of a payment rule.
func BenchmarkAuthorize(b *testing.B) {
	br := payBroker(b, brokertest.WithNow(func() time.Time { return t0 })).Broker
	v, err := br.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm",
		UntrustedInput: ptr(false), Grants: []grants.Spec{paymentGrant()}})
	if err != nil {
		b.Fatal(err)
	}
	body, _ := grants.ParseJSON([]byte(`{"amount": 50, "to": "acme", "currency": "EUR"}`))
	call := &grants.Call{Method: "POST", Segments: []string{"accounts", "acct-1", "payments"}, Header: http.Header{},
		Body: body, BodyJSON: true, HasBody: true}
	addr := netip.MustParseAddr("127.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		l, err := br.Check(v.Token, addr)
		if err != nil {
			b.Fatal(err)
		}
		d, err := br.Decide(l, "pay", call)
		if err != nil {
			b.Fatal(err)
		}
		d.Release()
	}
}

// BenchmarkApproveToUpstream measures a reviewer's approval (durable
// decision and audit, fsync mode) to the moment the upstream receives the
// stored request: the "approve click → upstream call" budget without the browser.
func BenchmarkApproveToUpstream(b *testing.B) {
	hit := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit <- struct{}{}
	}))
	defer up.Close()
	base, _ := url.Parse(up.URL)
	u := &upstream.Upstream{Name: "pay", Kind: "http", BaseURL: base, Sensitive: true, Timeout: 5 * time.Second,
		Source: staticSource{}, Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}}
	u.SetTransport(upstream.NewTransport())
	br := brokertest.MustOpenBroker(b, brokertest.WithDurability(store.DurabilityFsync), brokertest.WithUpstream(u),
		brokertest.WithNow(time.Now), brokertest.WithOptions(func(o *broker.Options) { o.DefaultTTL = time.Hour })).Broker
	v, err := br.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm",
		Grants: []grants.Spec{{Upstream: "pay", Rules: []grants.Rule{{Method: "POST", Path: "/pay"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	l, err := br.Check(v.Token, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		b.Fatal(err)
	}
	reviewer := auth.Principal{ID: "rev", Name: "rev", Role: auth.RoleReviewer}
	call := &grants.Call{Method: "POST", Segments: []string{"pay"}, Header: http.Header{}}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		d, err := br.Decide(l, "pay", call)
		if err != nil || !br.Gated(l, d) {
			b.Fatalf("decide: %v", err)
		}
		a, err := br.Hold(context.Background(), l, d, &upstream.Outbound{Method: "POST", Path: "/pay", Header: http.Header{}}, broker.CallRecord{Upstream: "pay"})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := br.DecideAction(context.Background(), reviewer, a.ID, "approve", ""); err != nil {
			b.Fatal(err)
		}
		<-hit
	}
}

type staticSource struct{}

func (staticSource) Fetch(context.Context) (upstream.Secret, error) {
	return upstream.NewSecret("bench-secret"), nil
}
func (staticSource) Describe() string { return "static" }

// BenchmarkCreateSession is durable session creation (the session with one
// grant, its token, and its audit record) in both durability modes, one
// caller at a time: the "session creation p50 ≤ 2 ms" budget without HTTP.
func BenchmarkCreateSession(b *testing.B) {
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		b.Run(d, func(b *testing.B) {
			br := payBroker(b, brokertest.WithDurability(d), brokertest.WithNow(time.Now)).Broker
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
