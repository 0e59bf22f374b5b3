// Package gate is the human gate's service: whether an allowed call must
// wait for a human (Gated), the actions awaiting or after approval (its
// approval.ActionStore), what each pending action holds (a slot of its
// session's pending limit and its grant's reservation, see pending.go), the
// timers of their expiry, the reviewers' decisions and the exactly-once
// execution of an approved action (the "executing" claim taken in the
// store, renewed as a lease while it runs, then finish), and the notifier
// and webhook that tell waiters, live pages and outside listeners of each
// change. The domain of actions and decisions (approval.Action,
// approval.Decide, the notifier, the webhook, the port) is in
// internal/approval.
//
// It knows sessions only as a Sandbox and the lookups it is given, and
// runs an approved action through the func it is given (the broker's call
// pipeline): it does not import the broker.
package gate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/usage"
)

// DefaultMaxPending bounds a session's pending actions unless configured
// (approval.max_pending_per_session).
const DefaultMaxPending = 16

// DefaultActionLease is how long an executing action's claim holds unless
// its owner renews it (every third of it). After it, any replica fails the
// action: it is never sent again. Replicas' clocks must agree to well
// within it (NTP).
const DefaultActionLease = 15 * time.Second

// defaultTTL is how long a pending action waits for a decision unless
// configured.
const defaultTTL = 15 * time.Minute

// Sandbox is what the gate needs of a live session: who it is (its id,
// task and creator, who may not approve its actions), what its Rule-of-Two
// standing is made of (its untrusted input and its grants), and its count
// of pending actions (a slot taken for each, given back when it leaves
// pending; see pending.go).
type Sandbox interface {
	SessionID() string
	TaskID() string
	CreatedBy() string
	UntrustedInput() bool
	// Grants are the session's grants, revoked and expired ones included.
	Grants() []*grants.Live
	// TakePending counts one more pending action unless the session has
	// limit already.
	TakePending(limit int64) bool
	// RestorePending counts a stored pending action again (after a
	// restart), whatever the limit.
	RestorePending()
	// FreePending gives back the slot of an action that left pending.
	FreePending()
}

// Recorder writes durable audit records (the audit log's writer).
type Recorder interface {
	Append(ctx context.Context, ev audit.Event, side *grants.UsageUpdate) (audit.Event, error)
}

// Runner runs an approved action's stored request through the call
// pipeline (the same checks, codes and records as a live call). claim
// turns the action's reservation on a grant into usage; claimed reports
// whether it was (the request was then sent, or may have been).
type Runner func(a approval.Action, claim func(*grants.Live) error) (res *approval.Result, claimed bool, err error)

// Config is what New needs; Webhook, TTL, MaxPending, Lease, Shared, Usage
// and Metrics are optional, every other field is required.
type Config struct {
	Store approval.ActionStore
	Audit Recorder
	// Actor is how the audit log names a reviewer.
	Actor func(auth.Principal) audit.Actor
	// Clock decides actions' expiry, and the lease's renewal and sweep.
	Clock clock.Clock
	Log   *slog.Logger
	// Live is the live session of an id (false: none in memory).
	Live func(id string) (Sandbox, bool)
	// Grant is a live grant of an id (false: none in memory).
	Grant func(id string) (*grants.Live, bool)
	// Engaged reports whether the global kill-switch is engaged.
	Engaged func() bool
	// Standing is the session's Rule-of-Two standing now.
	Standing func(Sandbox) session.RuleOfTwo
	// Run runs an approved action (see Runner).
	Run Runner
	// Replica names this broker as the owner of the actions it executes.
	Replica string

	Webhook    *approval.Webhook // announces pending actions and decisions, or nil
	TTL        time.Duration     // how long a pending action waits for a decision (default 15m)
	MaxPending int               // pending actions per session (default DefaultMaxPending)
	Lease      time.Duration     // an executing action's claim, renewed while it runs (default DefaultActionLease)
	// Shared: other replicas share the store (a change feed); the service
	// then sweeps the claims whose lease ended.
	Shared bool
	// Usage is the shared count of grants' limits, or nil (pending.go).
	Usage usage.Store
	// Metrics registers the approval queue's series (nil: not registered).
	Metrics prometheus.Registerer
}

// Service is the human gate's service.
type Service struct {
	store      approval.ActionStore
	notifier   *approval.Notifier // wakes waiters of an action, and live pages at any change
	webhook    *approval.Webhook  // announces pending actions and decisions, or nil
	expiry     *clock.Alarms      // wakes the service at pending actions' expiry
	audit      Recorder
	actor      func(auth.Principal) audit.Actor
	now        func() time.Time
	log        *slog.Logger
	ttl        time.Duration // how long a pending action waits for a decision
	maxPending int64         // pending actions per session
	live       func(id string) (Sandbox, bool)
	grant      func(id string) (*grants.Live, bool)
	engaged    func() bool
	standing   func(Sandbox) session.RuleOfTwo
	run        Runner
	clock      clock.Clock   // the lease's renewal and the sweep
	replica    string        // this broker, as the owner of what it executes
	lease      time.Duration // an executing action's claim, renewed while it runs
	shared     bool          // other replicas share the store (a change feed): sweep expired leases
	usage      usage.Store   // the shared count of grants' limits, or nil (pending.go)
	held       sync.Map      // action id → struct{}: pending actions whose reservation this replica counts (pending.go)
	joins      sync.Map      // session id + "\x00" + MCP join key → action id: what an identical MCP retry joins (join.go)
	sweepMu    sync.Mutex
	sweepTimer clock.Timer // nil when not sweeping; stopped by Close
	closed     bool
	executing  sync.WaitGroup // executions in flight (Drain waits for them)
}

// New makes the gate over its store. Load counts the stored actions
// again; StartSweep (with a shared store) starts failing claims whose
// lease ended; Close disarms its timers.
func New(c Config) (*Service, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &Service{
		store: c.Store, notifier: approval.NewNotifier(), webhook: c.Webhook, audit: c.Audit, actor: c.Actor,
		now: c.Clock.Now, log: c.Log, ttl: c.TTL, maxPending: int64(c.MaxPending),
		live: c.Live, grant: c.Grant, engaged: c.Engaged, standing: c.Standing, run: c.Run,
		clock: c.Clock, replica: c.Replica, lease: c.Lease, shared: c.Shared, usage: c.Usage,
	}
	if s.lease <= 0 {
		s.lease = DefaultActionLease
	}
	if s.ttl <= 0 {
		s.ttl = defaultTTL
	}
	if s.maxPending <= 0 {
		s.maxPending = DefaultMaxPending
	}
	s.expiry = clock.NewAlarms(c.Clock, s.expire)
	if c.Metrics != nil {
		c.Metrics.MustRegister(pendingCollector{s})
	}
	return s, nil
}

// check names every required field left unset.
func (c Config) check() error {
	return fault.Required("gate",
		fault.Field{Name: "Store", Unset: c.Store == nil},
		fault.Field{Name: "Audit", Unset: c.Audit == nil},
		fault.Field{Name: "Actor", Unset: c.Actor == nil},
		fault.Field{Name: "Clock", Unset: c.Clock == nil},
		fault.Field{Name: "Log", Unset: c.Log == nil},
		fault.Field{Name: "Live", Unset: c.Live == nil},
		fault.Field{Name: "Grant", Unset: c.Grant == nil},
		fault.Field{Name: "Engaged", Unset: c.Engaged == nil},
		fault.Field{Name: "Standing", Unset: c.Standing == nil},
		fault.Field{Name: "Run", Unset: c.Run == nil},
		fault.Field{Name: "Replica", Unset: c.Replica == ""},
	)
}

// Drain waits for the executions in flight to end (the broker cuts them
// first, at its sessions' end: an execution is bound to its session's
// standing), so none writes to a closed audit log.
func (s *Service) Drain() { s.executing.Wait() }

// Close disarms every expiry timer and the sweep; none is armed after it.
func (s *Service) Close() {
	s.expiry.Close()
	s.sweepMu.Lock()
	s.closed = true
	if s.sweepTimer != nil {
		s.sweepTimer.Stop()
	}
	s.sweepMu.Unlock()
}

// Changes returns a channel closed at the next change of any action or
// session, for live pages.
func (s *Service) Changes() <-chan struct{} { return s.notifier.Any() }

// Notify wakes live pages at a change that is not an action's (a session
// killed or expired, a grant revoked, an API token revoked).
func (s *Service) Notify() { s.notifier.Notify("") }
