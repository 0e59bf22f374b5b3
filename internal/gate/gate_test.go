package gate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// sandbox is a gate.Sandbox in memory.
type sandbox struct {
	id      string
	pending atomic.Int64
}

func (s *sandbox) SessionID() string      { return s.id }
func (s *sandbox) TaskID() string         { return "task-1" }
func (s *sandbox) CreatedBy() string      { return "operator" }
func (s *sandbox) UntrustedInput() bool   { return false }
func (s *sandbox) Grants() []*grants.Live { return nil }
func (s *sandbox) RestorePending()        { s.pending.Add(1) }
func (s *sandbox) FreePending()           { s.pending.Add(-1) }
func (s *sandbox) TakePending(limit int64) bool {
	if s.pending.Load() >= limit {
		return false
	}
	s.pending.Add(1)
	return true
}

// records are what the gate appends to the audit log.
type records struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (r *records) Append(_ context.Context, ev audit.Event, _ *grants.UsageUpdate) (audit.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return ev, nil
}

func (r *records) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.evs {
		out = append(out, ev.Type)
	}
	return out
}

// fixture is a gate over a real bbolt store, on a fake clock, with one
// live session.
type fixture struct {
	gate    *gate.Service
	store   *boltstore.Bolt
	clk     *clock.Fake
	sb      *sandbox
	rec     *records
	runs    atomic.Int64 // executions of approved actions
	engaged atomic.Bool
}

func mustGate(t *testing.T) *fixture {
	t.Helper()
	st, err := boltstore.OpenBolt(filepath.Join(t.TempDir(), "airlock.db"), "", discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{store: st, clk: clock.NewFake(t0), sb: &sandbox{id: "ses_1"}, rec: &records{}}
	f.gate, err = gate.New(gate.Config{
		Store: st, Audit: f.rec, Clock: f.clk, Log: discard, Replica: "rep_1",
		Actor: func(p auth.Principal) audit.Actor { return audit.Actor{Kind: p.Role, ID: p.ID} },
		Live: func(id string) (gate.Sandbox, bool) {
			if id != f.sb.id {
				return nil, false
			}
			return f.sb, true
		},
		Grant:    func(string) (*grants.Live, bool) { return nil, false },
		Engaged:  f.engaged.Load,
		Standing: func(gate.Sandbox) session.RuleOfTwo { return session.RuleOfTwo{} },
		Run: func(a approval.Action, _ func(*grants.Live) error) (*approval.Result, bool, error) {
			f.runs.Add(1)
			return &approval.Result{Status: 201, Body: []byte("done")}, true, nil
		},
		TTL: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.gate.Close)
	return f
}

// stored puts an action of the fixture's session in the store with status.
func (f *fixture) stored(t *testing.T, id string, status approval.Status) {
	t.Helper()
	a := approval.Action{ID: id, SessionID: f.sb.id, TaskID: "task-1", GrantID: "grt_1", Upstream: "api",
		SessionCreatedBy: "operator", CreatedAt: t0, ExpiresAt: t0.Add(time.Minute), Status: status,
		Request: approval.HeldRequest{Method: "POST", Path: "/pay"}, ApprovalsRequired: 1}
	if err := f.store.PutAction(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) status(t *testing.T, id string) approval.Status {
	t.Helper()
	a, err := f.gate.Action(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

// TestNewNamesEachRequiredField: New refuses a Config without its
// required fields, naming each.
func TestNewNamesEachRequiredField(t *testing.T) {
	_, err := gate.New(gate.Config{})
	if err == nil {
		t.Fatal("New of an empty Config succeeded")
	}
	for _, f := range []string{"Store", "Audit", "Actor", "Clock", "Log", "Live", "Grant", "Engaged", "Standing", "Run", "Replica"} {
		if !strings.Contains(err.Error(), "gate: Config."+f+" is required") {
			t.Errorf("the error does not name %s: %v", f, err)
		}
	}
}

// TestActionErrorCodes: a terminal, unsuccessful action is the sandbox's
// error with its problem code; an executed or pending one is none.
func TestActionErrorCodes(t *testing.T) {
	tests := []struct {
		name     string
		a        approval.Action
		want     error
		wantCode string
		wantText string
	}{
		{name: "denied", a: approval.Action{Status: approval.Denied, Reason: "denied by bob"}, want: gate.ErrActionDenied,
			wantCode: "approval_denied", wantText: "the reviewer denied this action: denied by bob"},
		{name: "expired", a: approval.Action{Status: approval.Expired}, want: gate.ErrActionExpired,
			wantCode: "approval_expired", wantText: "the action expired before a decision"},
		{name: "failed", a: approval.Action{Status: approval.Failed, Result: &approval.Result{Code: "upstream_error"}}, want: gate.ErrActionFailed,
			wantCode: "upstream_error", wantText: "the approved action could not be executed (upstream_error)"},
		{name: "executed", a: approval.Action{Status: approval.Executed}},
		{name: "pending", a: approval.Action{Status: approval.Pending}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gate.ActionError(tt.a)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("ActionError = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ActionError = %v, want %v", err, tt.want)
			}
			if diff := cmp.Diff([]string{tt.wantCode, tt.wantText}, []string{fault.Of(err).Code(), err.Error()}); diff != "" {
				t.Errorf("code and text (-want +got):\n%s", diff)
			}
		})
	}
	if got := fault.Of(gate.ErrTooManyPending).Code(); got != "too_many_pending" {
		t.Errorf("ErrTooManyPending's code %q", got)
	}
}

// TestLoadRestoresPendingAndExpiresOnTheClock: after a restart a stored
// pending action counts against its session again and expires on the
// clock, giving the slot back; it can no longer be approved.
func TestLoadRestoresPendingAndExpiresOnTheClock(t *testing.T) {
	f := mustGate(t)
	f.stored(t, "act_1", approval.Pending)
	if err := f.gate.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.sb.pending.Load(); n != 1 {
		t.Fatalf("pending slots after Load = %d, want 1", n)
	}
	f.clk.Advance(59 * time.Second)
	if s := f.status(t, "act_1"); s != approval.Pending {
		t.Fatalf("before its expiry: %s", s)
	}
	f.clk.Advance(time.Second)
	if s := f.status(t, "act_1"); s != approval.Expired {
		t.Fatalf("at its expiry: %s, want expired", s)
	}
	if n := f.sb.pending.Load(); n != 0 {
		t.Fatalf("pending slots after the expiry = %d, want 0", n)
	}
	if _, err := f.gate.Decide(context.Background(), auth.Principal{ID: "bob", Role: "reviewer"}, "act_1", "approve", ""); !errors.Is(err, approval.ErrDecided) {
		t.Fatalf("approve an expired action: %v, want ErrDecided", err)
	}
	if diff := cmp.Diff([]string{"action.expired"}, f.rec.types()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestApprovalExecutesOnce: of reviewers approving at once, one wins the
// executing claim and the stored request runs once; the others are
// refused.
func TestApprovalExecutesOnce(t *testing.T) {
	f := mustGate(t)
	f.stored(t, "act_1", approval.Pending)
	if err := f.gate.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var wins atomic.Int64
	for _, r := range []string{"bob", "carol", "dave", "erin"} {
		wg.Go(func() {
			if _, err := f.gate.Decide(context.Background(), auth.Principal{ID: r, Name: r, Role: "reviewer"}, "act_1", "approve", ""); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, approval.ErrDecided) {
				t.Errorf("%s: %v", r, err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d approvals won, want 1", wins.Load())
	}
	a, err := f.gate.Wait(context.Background(), "act_1", 10*time.Second)
	if err != nil || a.Status != approval.Executed || a.Result == nil || string(a.Result.Body) != "done" {
		t.Fatalf("after the approval: %+v %v", a, err)
	}
	f.gate.Drain() // the execution's record is written after its outcome is stored
	if n := f.runs.Load(); n != 1 {
		t.Fatalf("the action ran %d times, want 1", n)
	}
	if n := f.sb.pending.Load(); n != 0 {
		t.Fatalf("pending slots after the approval = %d, want 0", n)
	}
	if diff := cmp.Diff([]string{"action.approved", "action.executed"}, f.rec.types()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestNoApprovalWhileEngaged: the kill-switch refuses approvals; the
// action stays pending.
func TestNoApprovalWhileEngaged(t *testing.T) {
	f := mustGate(t)
	f.stored(t, "act_1", approval.Pending)
	f.engaged.Store(true)
	if _, err := f.gate.Decide(context.Background(), auth.Principal{ID: "bob", Role: "reviewer"}, "act_1", "approve", ""); !errors.Is(err, killswitch.ErrEngaged) {
		t.Fatalf("approve while engaged: %v, want killswitch.ErrEngaged", err)
	}
	if s := f.status(t, "act_1"); s != approval.Pending {
		t.Fatalf("after a refused approval: %s", s)
	}
}

// TestLoadFailsWhatWasExecuting: an action left executing by a stopped
// broker is failed at Load, never sent again.
func TestLoadFailsWhatWasExecuting(t *testing.T) {
	f := mustGate(t)
	f.stored(t, "act_1", approval.Executing)
	if err := f.gate.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, err := f.gate.Action(context.Background(), "act_1")
	if err != nil || a.Status != approval.Failed || a.Result == nil || a.Result.Code != "upstream_error" {
		t.Fatalf("after Load: %+v %v", a, err)
	}
	if n := f.runs.Load(); n != 0 {
		t.Fatalf("the action ran %d times, want 0", n)
	}
	if diff := cmp.Diff([]string{"action.failed"}, f.rec.types()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
