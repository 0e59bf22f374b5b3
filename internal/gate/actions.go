package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/ids"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Audit event types of the human gate.
const (
	typeActionPending  = "action.pending"
	typeActionApproved = "action.approved"
	typeActionDenied   = "action.denied"
	typeActionExpired  = "action.expired"
	typeActionExecuted = "action.executed"
	typeActionFailed   = "action.failed"
)

// Gated reports whether an allowed call of l must wait for a human: one of
// its decisions (the one that reserved its use, and those of further
// permissions it needs) is an irreversible rule under Rule of Two (A∧B∧C)
// or of a grant with approval: always.
func (s *Service) Gated(l Sandbox, d *grants.Decision, also ...*grants.Decision) bool {
	gated := func(d *grants.Decision) bool {
		return d.Irreversible && (d.Grant.Grant.Approval == grants.ApprovalAlways || s.standing(l).Gated())
	}
	if gated(d) {
		return true
	}
	for _, x := range also {
		if gated(x) {
			return true
		}
	}
	return false
}

// Hold turns a gated call of l into a pending action that stores the
// request exactly as it will be sent; call is the call's audit record (its
// upstream, request id, trace), which the pending record extends. The
// action keeps the decision's reservation (one use and its budgeted amounts
// count against the grant while it is pending) and takes a slot of the
// session's pending limit; it refuses with ErrTooManyPending when none is
// left. See pending.go. also are the decisions of further permissions the
// request needs: the action names their grants, and execute runs it only
// while each of them still permits (live, unexpired, not exhausted).
//
// m, for an MCP tool call, is what its reviewers see beside the request;
// its Join key lets an identical retry find the action (see Joined).
func (s *Service) Hold(ctx context.Context, l Sandbox, d *grants.Decision, out *upstream.Outbound, m *approval.MCPCall, call audit.Event, also ...*grants.Decision) (approval.Action, error) {
	if !l.TakePending(s.maxPending) {
		d.Release()
		return approval.Action{}, fmt.Errorf("%w (at most %d)", ErrTooManyPending, s.maxPending)
	}
	d.Pend()
	now := s.now().UTC()
	r2 := s.standing(l)
	a := approval.Action{
		ID: ids.New("act_", now), SessionID: l.SessionID(), TaskID: l.TaskID(), GrantID: d.Grant.Grant.ID,
		Upstream: call.Upstream, RequestID: call.RequestID, SessionCreatedBy: l.CreatedBy(),
		CreatedAt: now, ExpiresAt: now.Add(s.ttl), Status: approval.Pending,
		Request: approval.HeldRequest{Method: out.Method, Path: out.Path, Query: out.Query, Header: out.Header.Clone(), Body: out.Body},
		Pinned:  d.Pinned, Filled: d.Filled,
		Standing:          approval.Standing{UntrustedInput: r2.UntrustedInput, SensitiveAccess: r2.SensitiveAccess, ExternalAction: r2.ExternalAction},
		ApprovalsRequired: d.Grant.Grant.ApprovalsRequired, Amounts: d.Amounts(), MCP: m,
	}
	for _, x := range also {
		if x != nil && x.Grant != nil && x.Grant != d.Grant && !slices.Contains(a.PermitGrants, x.Grant.Grant.ID) {
			a.PermitGrants = append(a.PermitGrants, x.Grant.Grant.ID)
		}
	}
	s.held.Store(a.ID, struct{}{}) // before the store: its change may be applied at once
	if err := s.store.PutAction(ctx, &a); err != nil {
		s.neverStored(a)
		return a, fmt.Errorf("store action: %w", err)
	}
	ev := call
	ev.Type, ev.ActionID, ev.GrantID, ev.Decision = typeActionPending, a.ID, a.GrantID, "hold"
	// The action is stored: its record is written even if the caller
	// leaves meanwhile (a client that gives up withdraws it, later).
	if _, err := s.audit.Append(context.WithoutCancel(ctx), ev, nil); err != nil {
		// A reviewer may have decided meanwhile: then that decision released it.
		if _, uerr := s.store.UpdateAction(context.Background(), a.ID, func(x *approval.Action) error {
			if x.Status != approval.Pending {
				return errUnchanged
			}
			x.Status, x.Reason = approval.Failed, "audit unavailable"
			return nil
		}); uerr == nil {
			s.leftPending(a)
		}
		return a, err
	}
	s.expiry.Set(a.ID, a.ExpiresAt)
	s.index(a)
	s.announce(a, typeActionPending, "")
	return a, nil
}

func (s *Service) announce(a approval.Action, event, reviewer string) {
	s.notifier.Notify(a.ID)
	s.webhook.Send(approval.WebhookEvent{
		Event: event, ActionID: a.ID, SessionID: a.SessionID, TaskID: a.TaskID, Upstream: a.Upstream,
		Method: a.Request.Method, Path: a.Request.Path, Status: string(a.Status), ExpiresAt: a.ExpiresAt,
		Reviewer: reviewer, At: s.now().UTC(),
	})
}

var errUnchanged = errors.New("unchanged")

// expire moves a pending action past its expiry to expired; it can never run.
func (s *Service) expire(id string) {
	s.expiry.Stop(id)
	a, err := s.store.UpdateAction(context.Background(), id, func(a *approval.Action) error {
		if a.Status != approval.Pending {
			return errUnchanged
		}
		a.Status, a.Reason = approval.Expired, "no decision before "+a.ExpiresAt.Format(time.RFC3339)
		return nil
	})
	if err != nil {
		if !errors.Is(err, errUnchanged) {
			s.log.Error("expire action", "action_id", id, "err", err)
		}
		return
	}
	s.leftPending(a)
	s.recordAction(a, typeActionExpired, audit.Actor{Kind: "system"}, "")
	s.announce(a, typeActionExpired, "")
}

func (s *Service) recordAction(a approval.Action, typ string, actor audit.Actor, reason string) {
	ev := audit.Event{Type: typ, Actor: actor, SessionID: a.SessionID, TaskID: a.TaskID, GrantID: a.GrantID,
		ActionID: a.ID, Upstream: a.Upstream, Method: a.Request.Method, Path: a.Request.Path, Reason: reason, RequestID: a.RequestID}
	if a.Result != nil {
		ev.Status, ev.Code, ev.LatencyUS, ev.BytesOut = a.Result.Status, a.Result.Code, a.Result.LatencyUS, int64(len(a.Result.Body))
	}
	if _, err := s.audit.Append(context.Background(), ev, nil); err != nil {
		s.log.Error("audit of an action failed", "action_id", a.ID, "type", typ, "err", err)
	}
}

// Decide records a reviewer's verdict. The final approval executes the
// stored request exactly once, in the background; the answer does not wait
// for the upstream.
func (s *Service) Decide(ctx context.Context, p auth.Principal, id, verdict, comment string) (approval.Action, error) {
	if len(comment) > 1000 {
		return approval.Action{}, &fault.FieldError{Field: "comment", Msg: "at most 1000 characters"}
	}
	if verdict == "approve" && s.engaged() {
		return approval.Action{}, fmt.Errorf("%w: no action can be approved while it is engaged", killswitch.ErrEngaged)
	}
	var execute bool
	a, err := s.store.UpdateAction(ctx, id, func(a *approval.Action) error {
		var err error
		now := s.now().UTC()
		execute, err = approval.Decide(a, approval.Reviewer{ID: p.ID, Name: p.Name}, verdict, comment, now)
		if execute { // the claim: this replica executes it, while it renews the lease
			a.Owner, a.LeaseUntil = s.replica, now.Add(s.lease)
		}
		return err
	})
	if errors.Is(err, approval.ErrExpired) {
		s.expire(id)
	}
	if err != nil {
		return a, err
	}
	held := false // whether this replica counted the action's reservation (pending.go)
	switch {
	case a.Status == approval.Denied:
		s.leftPending(a)
	case execute: // the grant's reservation goes to execute
		if held = s.unhold(a.ID); held {
			s.freeSlot(a.SessionID)
		}
	}
	typ := typeActionApproved
	if verdict == "deny" {
		typ = typeActionDenied
		s.expiry.Stop(id)
	}
	ev := audit.Event{Type: typ, Actor: s.actor(p), SessionID: a.SessionID, TaskID: a.TaskID, GrantID: a.GrantID,
		ActionID: a.ID, Upstream: a.Upstream, Method: a.Request.Method, Path: a.Request.Path, Reason: comment}
	if _, err := s.audit.Append(ctx, ev, nil); err != nil {
		if execute {
			s.unsent(a, held)
			s.finish(a.ID, &approval.Result{Code: fault.AuditUnavailable.Code(), ExecutedAt: s.now().UTC()}, approval.Failed, "audit unavailable")
		}
		return a, err
	}
	s.announce(a, typ, p.ID)
	if execute {
		s.expiry.Stop(id)
		s.executing.Add(1)
		go func() {
			defer s.executing.Done()
			s.execute(a, held)
		}()
	}
	return a, nil
}

// execute sends an approved action's stored request once, through the
// call pipeline (Config.Run: the same checks, codes and records as a
// live call). The action's reservation on its grant (held since Hold, when
// held: on this replica) becomes usage when it is sent, and is released
// when it is not. While it runs, this replica renews its claim's lease; a
// replica that stops renewing (it died) leaves the action to be failed by
// another once the lease ends (sweep), never sent again.
func (s *Service) execute(a approval.Action, held bool) {
	start := s.now()
	stopRenewal := s.renewLease(a.ID)
	reserved := held
	res, claimed, err := s.run(a, func(g *grants.Live) error {
		if !reserved { // held by the replica that created it: counted here now
			g.RestorePending(a.Amounts)
			reserved = true
		}
		return g.ConsumePending(a.Amounts)
	})
	stopRenewal()
	if err != nil {
		if !claimed {
			s.unsent(a, reserved)
		}
		s.finish(a.ID, &approval.Result{Code: fault.Of(err).Code(), ExecutedAt: s.now().UTC()}, approval.Failed, reasonOf(err))
		return
	}
	res.ExecutedAt, res.LatencyUS = s.now().UTC(), s.now().Sub(start).Microseconds()
	s.finish(a.ID, res, approval.Executed, "")
}

// reasonOf is what an action's failure says of err: its text, or for a
// private kind (whose text may name what the sandbox must not learn) its
// safe cause (fault.CauseOf), else the kind's own message.
func reasonOf(err error) string {
	f := fault.Find(err)
	switch {
	case f == nil:
		return "failed"
	case f.Private:
		if cause := fault.CauseOf(err); cause != "" {
			return cause // the failure's safe cause, as its call's records say
		}
		return f.Msg
	}
	return err.Error()
}

// finish stores the outcome of an execution and wakes waiters.
func (s *Service) finish(id string, res *approval.Result, status approval.Status, reason string) {
	a, err := s.store.UpdateAction(context.Background(), id, func(a *approval.Action) error {
		if a.Status != approval.Executing {
			return errUnchanged
		}
		a.Status, a.Result, a.Reason = status, res, reason
		return nil
	})
	if errors.Is(err, errUnchanged) {
		s.log.Warn("action outcome not stored: it was failed meanwhile (its claim's lease ended)", "action_id", id, "status", string(status))
		return
	}
	if err != nil {
		s.log.Error("store action outcome", "action_id", id, "err", err)
		return
	}
	typ := typeActionExecuted
	if status == approval.Failed {
		typ = typeActionFailed
	}
	s.recordAction(a, typ, audit.Actor{Kind: "system"}, reason)
	s.announce(a, typ, "")
}

// DenySession denies the pending actions of a killed session.
func (s *Service) DenySession(ctx context.Context, p auth.Principal, sessionID string) {
	s.denyWhere(ctx, s.actor(p), p.ID, "session killed", func(a *approval.Action) bool { return a.SessionID == sessionID })
}

// DenyLapsed denies the pending actions that depend on what ended: a
// session's (g nil: its expiry) or a grant's (its expiry or revocation,
// reason saying which). An action depends on the grant that holds its use
// and on the grants that permit it.
func (s *Service) DenyLapsed(ctx context.Context, actor audit.Actor, reviewer, sessionID string, g *grants.Live, reason string) {
	s.denyWhere(ctx, actor, reviewer, reason, func(a *approval.Action) bool {
		if a.SessionID != sessionID {
			return false
		}
		return g == nil || a.GrantID == g.Grant.ID || slices.Contains(a.PermitGrants, g.Grant.ID)
	})
}

// denyWhere denies the pending actions that match, with reason, waking
// their waiters.
func (s *Service) denyWhere(ctx context.Context, actor audit.Actor, reviewer, reason string, match func(*approval.Action) bool) {
	pending, err := s.store.Actions(ctx, approval.Pending, 0)
	if err != nil {
		s.log.Error("list pending actions", "err", err)
		return
	}
	for _, a := range pending {
		if match(&a) {
			s.deny(ctx, actor, reviewer, reason, a.ID)
		}
	}
}

// deny denies one pending action with reason, waking its waiters; an
// action no longer pending is left as it is.
func (s *Service) deny(ctx context.Context, actor audit.Actor, reviewer, reason, id string) {
	a, err := s.store.UpdateAction(ctx, id, func(a *approval.Action) error {
		if a.Status != approval.Pending {
			return errUnchanged
		}
		a.Status, a.Reason = approval.Denied, reason
		return nil
	})
	if err != nil {
		return
	}
	s.leftPending(a)
	s.expiry.Stop(a.ID)
	s.recordAction(a, typeActionDenied, actor, reason)
	s.announce(a, typeActionDenied, reviewer)
}

// Load re-arms expiry of pending actions after a restart and counts their
// reservations again (session slot, grant use and amounts), and marks
// actions that were executing as failed: their outcome is unknown and they
// are never sent again.
func (s *Service) Load(ctx context.Context) error {
	all, err := s.store.Actions(ctx, "", 0)
	if err != nil {
		return fmt.Errorf("load actions: %w", err)
	}
	for _, a := range all {
		switch a.Status {
		case approval.Pending:
			s.restorePending(a)
			s.expiry.Set(a.ID, a.ExpiresAt)
			s.index(a)
		case approval.Executed:
			s.index(a) // an identical MCP retry gets its stored result until it expires
		case approval.Executing:
			// Its own (or, alone on the store, any) stale claim is failed
			// now, and a claim whose lease ended; another live replica's
			// is left to it (the sweep fails it if its lease ends).
			if !s.shared || a.Owner == "" || a.Owner == s.replica || s.leaseOver(a) {
				s.failExecuting(a.ID, !s.shared || a.Owner == s.replica,
					"the broker stopped while executing; the outcome is unknown and the request is not sent again")
			}
		}
	}
	return nil
}

// Action returns one action (approval.ErrNotFound for an unknown id).
func (s *Service) Action(ctx context.Context, id string) (approval.Action, error) {
	return s.store.Action(ctx, id)
}

// Actions lists actions by status ("" for all), newest first, at most limit.
func (s *Service) Actions(ctx context.Context, status approval.Status, limit int) ([]approval.Action, error) {
	return s.store.Actions(ctx, status, limit)
}

// SessionAction returns an action of the sandbox's own session
// (approval.ErrNotFound for another session's).
func (s *Service) SessionAction(ctx context.Context, l Sandbox, id string) (approval.Action, error) {
	a, err := s.store.Action(ctx, id)
	if err != nil {
		return a, err
	}
	if a.SessionID != l.SessionID() {
		return approval.Action{}, approval.ErrNotFound
	}
	return a, nil
}

// Wait waits up to d for the action to reach a terminal state, waking on
// its change (no polling).
func (s *Service) Wait(ctx context.Context, id string, d time.Duration) (approval.Action, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		changed := s.notifier.Changed(id) // before the read: no lost wake-up
		a, err := s.store.Action(ctx, id)
		if err != nil || a.Status.Terminal() || d <= 0 {
			return a, err
		}
		select {
		case <-changed:
		case <-timer.C:
			return s.store.Action(ctx, id)
		case <-ctx.Done():
			return a, nil
		}
	}
}
