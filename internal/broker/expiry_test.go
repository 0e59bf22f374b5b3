package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	airclock "github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Approval expiry on the injected clock: the tests advance it instead of
// waiting for the real 15 minutes (or a short configured timeout).

var expT0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var expReviewer = auth.Principal{ID: "rev", Name: "rev", Role: auth.RoleReviewer}

// expBroker opens a broker on st (from brokertest.MustOpenStore, so that
// it outlives the brokers opened on it) with opts' clock; its upstream
// "pay" is unreachable, so an action that ran would end failed, never
// expired. Kit.Close closes it (once; the test's cleanup does too).
func expBroker(tb testing.TB, st *boltstore.Bolt, opts ...brokertest.Option) *brokertest.Kit {
	tb.Helper()
	pay := brokertest.Unreachable("pay")
	pay.Source = staticSource{}
	opts = append([]brokertest.Option{brokertest.WithStore(st), brokertest.WithUpstream(pay),
		brokertest.WithOptions(func(o *broker.Options) { o.MaxSessionTTL, o.DefaultTTL = 24*time.Hour, 24*time.Hour })}, opts...)
	return brokertest.MustOpenBroker(tb, opts...)
}

// expHold creates a session whose grant (one use, approval always) holds
// its first call, and returns the session and the pending action.
func expHold(t *testing.T, b *broker.Broker) (*sessions.LiveSession, approval.Action) {
	t.Helper()
	v, err := b.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false),
		Grants: []grants.Spec{{Upstream: "pay", MaxUses: 1, Approval: grants.ApprovalAlways, Rules: []grants.Rule{{Method: "POST", Path: "/pay"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.Decide(l, "pay", expCall())
	if err != nil || !b.Gated(l, d) {
		t.Fatalf("decide: %v (gated %v)", err, err == nil && b.Gated(l, d))
	}
	a, err := b.Hold(context.Background(), l, d, &upstream.Outbound{Method: "POST", Path: "/pay", Header: http.Header{}}, broker.CallRecord{Upstream: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	return l, a
}

func expCall() *grants.Call {
	return &grants.Call{Method: "POST", Segments: []string{"pay"}, Header: http.Header{}}
}

func expStatus(t *testing.T, b *broker.Broker, id string) approval.Status {
	t.Helper()
	a, err := b.Action(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

// expAudit returns the times of the audit records of type typ about action id.
func expAudit(t *testing.T, st *boltstore.Bolt, typ, id string) []time.Time {
	t.Helper()
	var at []time.Time
	err := st.ScanAudit(context.Background(), 0, func(_ uint64, data []byte) error {
		var ev struct {
			Type     string    `json:"type"`
			ActionID string    `json:"action_id"`
			Time     time.Time `json:"time"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return err
		}
		if ev.Type == typ && ev.ActionID == id {
			at = append(at, ev.Time)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// A pending action expires exactly when the broker's clock reaches its
// expiry: not a nanosecond before, the sandbox waiting on it wakes, the
// reservation it held comes back, the expiry is audited at that time, and
// it can no longer be approved.
func TestApprovalExpiresOnInjectedClock(t *testing.T) {
	clk := airclock.NewFake(expT0)
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	events := make(chan approval.WebhookEvent, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev approval.WebhookEvent
		_ = json.NewDecoder(r.Body).Decode(&ev)
		events <- ev
	}))
	t.Cleanup(hook.Close)
	k := expBroker(t, st, brokertest.WithClock(clk), brokertest.WithOptions(func(o *broker.Options) { // ApprovalTTL: the default 15m
		o.Webhook = &approval.Webhook{URL: hook.URL, Secret: []byte("webhook-secret"), Client: hook.Client(), Log: brokertest.Discard(), Now: clk.Now}
	}))
	b := k.Broker
	l, a := expHold(t, b)
	if want := expT0.Add(15 * time.Minute); !a.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", a.ExpiresAt, want)
	}
	// The pending action holds the grant's only use.
	if _, err := b.Decide(l, "pay", expCall()); !errors.Is(err, grants.ErrGrantExhausted) {
		t.Fatalf("a second call while the first is pending: %v, want ErrGrantExhausted", err)
	}

	if ev := <-events; ev.Event != "action.pending" || ev.ActionID != a.ID {
		t.Fatalf("webhook %s %s, want action.pending %s", ev.Event, ev.ActionID, a.ID)
	}

	waited := make(chan approval.Action, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		w, _ := b.WaitAction(ctx, a.ID, time.Hour) // woken by the change, never by this bound
		waited <- w
	}()

	clk.Advance(15*time.Minute - time.Nanosecond)
	if s := expStatus(t, b, a.ID); s != approval.Pending {
		t.Fatalf("a nanosecond before expiry: %s, want pending", s)
	}
	clk.Advance(time.Nanosecond) // runs the expiry before it returns
	if s := expStatus(t, b, a.ID); s != approval.Expired {
		t.Fatalf("at expiry: %s, want expired", s)
	}
	if w := <-waited; w.Status != approval.Expired || !errors.Is(gate.ActionError(w), gate.ErrActionExpired) {
		t.Fatalf("the waiting sandbox got %s (%v)", w.Status, gate.ActionError(w))
	}
	if clk.Timers() != 1 { // the session's own expiry (internal/sessions/lifetime.go)
		t.Fatalf("%d timers still armed after the expiry, want only the session's", clk.Timers())
	}
	if ev := <-events; ev.Event != "action.expired" || ev.ActionID != a.ID || !ev.At.Equal(a.ExpiresAt) {
		t.Fatalf("webhook %s %s at %v, want action.expired %s at %v", ev.Event, ev.ActionID, ev.At, a.ID, a.ExpiresAt)
	}
	// The use comes back at once.
	d, err := b.Decide(l, "pay", expCall())
	if err != nil {
		t.Fatalf("after expiry the grant's use is back: %v", err)
	}
	d.Release()
	if _, err := b.DecideAction(context.Background(), expReviewer, a.ID, "approve", ""); !errors.Is(err, approval.ErrDecided) {
		t.Fatalf("approve an expired action: %v, want ErrDecided", err)
	}
	if s := expStatus(t, b, a.ID); s != approval.Expired {
		t.Fatalf("after an approval attempt: %s, want expired", s)
	}
	k.Close() // commits the audit records
	if got := expAudit(t, st, "action.expired", a.ID); len(got) != 1 || !got[0].Equal(expT0.Add(15*time.Minute)) {
		t.Fatalf("action.expired records: %v, want one at %v", got, expT0.Add(15*time.Minute))
	}
}

// An action past its expiry on the broker's clock is refused approval and
// expired then, whether or not its timer has woken the broker (here the
// timer is the runtime's, 15 real minutes away).
func TestApprovalPastExpiryRefusedBeforeTimer(t *testing.T) {
	var mu sync.Mutex
	now := expT0
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	b := expBroker(t, st, brokertest.WithNow(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })).Broker
	l, a := expHold(t, b)
	mu.Lock()
	now = a.ExpiresAt
	mu.Unlock()
	if _, err := b.DecideAction(context.Background(), expReviewer, a.ID, "approve", ""); !errors.Is(err, approval.ErrExpired) {
		t.Fatalf("approve past expiry: %v, want ErrExpired", err)
	}
	if s := expStatus(t, b, a.ID); s != approval.Expired {
		t.Fatalf("after the refused approval: %s, want expired", s)
	}
	d, err := b.Decide(l, "pay", expCall())
	if err != nil {
		t.Fatalf("the expired action's use is back: %v", err)
	}
	d.Release()
}

// After a restart the pending actions' expiry is armed again on the
// injected clock: one still in time expires at its own expiry, one whose
// expiry passed while the broker was down expires at the first tick.
func TestPendingExpiryRearmedAfterRestart(t *testing.T) {
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	k := expBroker(t, st, brokertest.WithFakeClock(expT0))
	_, early := expHold(t, k.Broker)
	k.Close()

	k = expBroker(t, st, brokertest.WithFakeClock(expT0.Add(10*time.Minute)),
		brokertest.WithOptions(func(o *broker.Options) { o.ApprovalTTL = time.Hour }))
	_, late := expHold(t, k.Broker) // expires at t0+70m
	k.Close()

	k = expBroker(t, st, brokertest.WithFakeClock(expT0.Add(20*time.Minute)))
	b, clk := k.Broker, k.Clock
	if s := expStatus(t, b, early.ID); s != approval.Pending {
		t.Fatalf("before any timer ran: %s", s)
	}
	clk.Advance(0)
	if s := expStatus(t, b, early.ID); s != approval.Expired {
		t.Fatalf("expired while the broker was down: %s, want expired", s)
	}
	clk.Advance(50*time.Minute - time.Nanosecond)
	if s := expStatus(t, b, late.ID); s != approval.Pending {
		t.Fatalf("a nanosecond before its expiry: %s, want pending", s)
	}
	clk.Advance(time.Nanosecond)
	if s := expStatus(t, b, late.ID); s != approval.Expired {
		t.Fatalf("at its expiry: %s, want expired", s)
	}
}

// stepClock wakes its timers only when the test calls them, at any time
// the test sets: a wall clock that ran behind the runtime's timer.
type stepClock struct {
	mu    sync.Mutex
	now   time.Time
	wakes []func()
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *stepClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func (c *stepClock) AfterFunc(_ time.Duration, f func()) airclock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakes = append(c.wakes, f)
	return stepTimer{}
}

// wake runs the last timer armed.
func (c *stepClock) wake() {
	c.mu.Lock()
	f := c.wakes[len(c.wakes)-1]
	c.mu.Unlock()
	f()
}

func (c *stepClock) armed() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.wakes) }

type stepTimer struct{}

func (stepTimer) Stop() bool { return true }

// A timer only wakes the broker; the clock decides. Woken before the
// action's expiry on the broker's clock, it leaves the action pending and
// sleeps again; woken at its expiry, it expires it.
func TestExpiryTimerWakesClockDecides(t *testing.T) {
	clk := &stepClock{now: expT0}
	b := expBroker(t, brokertest.MustOpenStore(t, store.DurabilityBuffered), brokertest.WithClock(clk)).Broker
	_, a := expHold(t, b)
	if clk.armed() != 2 { // the session's expiry (internal/sessions/lifetime.go), then the action's
		t.Fatalf("timers armed by a session and a hold: %d, want 2", clk.armed())
	}
	clk.set(a.ExpiresAt.Add(-time.Second))
	clk.wake()
	if s := expStatus(t, b, a.ID); s != approval.Pending {
		t.Fatalf("woken a second early: %s, want pending", s)
	}
	if clk.armed() != 3 {
		t.Fatalf("an early wake-up did not arm the timer again (%d armed)", clk.armed())
	}
	clk.set(a.ExpiresAt)
	clk.wake()
	if s := expStatus(t, b, a.ID); s != approval.Expired {
		t.Fatalf("woken at expiry: %s, want expired", s)
	}
}

// An action held for an upstream that a restart's configuration no longer
// has fails when approved, gives its use back, and does not take the broker
// down.
func TestApprovedActionForRemovedUpstreamFails(t *testing.T) {
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	k := expBroker(t, st, brokertest.WithFakeClock(expT0))
	l, a := expHold(t, k.Broker)
	grantID := l.Grants()[0].Grant.ID
	k.Close()

	k = brokertest.MustOpenBroker(t, brokertest.WithStore(st), brokertest.WithFakeClock(expT0),
		brokertest.WithUpstream(brokertest.Unreachable("other")),
		brokertest.WithOptions(func(o *broker.Options) { o.MaxSessionTTL, o.DefaultTTL = 24*time.Hour, 24*time.Hour }))
	if _, err := k.Broker.DecideAction(context.Background(), expReviewer, a.ID, "approve", ""); err != nil {
		t.Fatal(err)
	}
	got, err := k.Broker.WaitAction(context.Background(), a.ID, 10*time.Second)
	if err != nil || got.Status != approval.Failed || got.Result == nil || got.Result.Code != "not_found" {
		// As a live call to an upstream no longer configured.
		t.Fatalf("action = %+v, %v; want failed with not_found", got, err)
	}
	g, err := k.Broker.Grant(context.Background(), grantID)
	if err != nil {
		t.Fatal(err)
	}
	if g.Usage.Uses != 0 || g.Pending.Uses != 0 {
		t.Fatalf("grant after the failed action: uses %d, pending %d; want both 0", g.Usage.Uses, g.Pending.Uses)
	}
}
