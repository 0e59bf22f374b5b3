// Package storetest is the contract suite of the broker's store ports
// (sessions.Store, apitokens.Store, meta.Store, approval.ActionStore,
// auditlog.Store, broker.HealthCheck, usage.Store and changefeed.Feed where
// the store offers them): what every adapter must do, including each
// port's not-found sentinel. It is what defines the ports' behaviour beyond
// their doc comments; bbolt runs it
// (internal/store/boltstore), PostgreSQL too (internal/store/pgstore, the
// change feed's part only there), and so does any new adapter:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Ports {
//			s := openEmptyStore(t) // closed by t.Cleanup
//			return storetest.All(s)
//		})
//	}
//
// open must return ports over a fresh, empty store each time; the ports of
// one call share that store (a grant's usage rides with audit records).
// Times are compared to the microsecond (PostgreSQL's precision) and in any
// location.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auditlog"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/usage"
)

// Ports are an adapter's implementations of the broker's store ports, all
// over one store.
type Ports struct {
	Sessions sessions.Store
	Tokens   apitokens.Store
	Meta     meta.Store // also the kill-switch's (killswitch.Store)
	Actions  approval.ActionStore
	Audit    auditlog.Store
	Health   broker.HealthCheck
	// Usage counts grants' limits for a store several brokers share
	// (PostgreSQL), or nil: the grants count in memory (bbolt). The
	// limits' contract runs either way, through the grants' reservation.
	Usage usage.Store
	// Feed is the change feed of a store several brokers share
	// (PostgreSQL), or nil: one broker per store (bbolt), whose memory is
	// the truth. The feed's contract (changes.go) runs only when it is set.
	Feed changefeed.Feed
}

// All is every port of a whole store.
func All(s store.Store) Ports {
	u, _ := s.(usage.Store)
	f, _ := s.(changefeed.Feed)
	return Ports{Sessions: s, Tokens: s, Meta: s, Actions: s, Audit: s, Health: s, Usage: u, Feed: f}
}

// Run runs the contract against the ports open returns (a fresh, empty
// store for each subtest).
func Run(t *testing.T, open func(t *testing.T) Ports) {
	t.Run("Sessions", func(t *testing.T) { testSessions(t, open) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, open) })
	t.Run("Meta", func(t *testing.T) { testMeta(t, open) })
	t.Run("Actions", func(t *testing.T) { testActions(t, open) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, open) })
	t.Run("Limits", func(t *testing.T) { testLimits(t, open) })
	t.Run("Races", func(t *testing.T) { testRaces(t, open) })
	t.Run("Changes", func(t *testing.T) { testChanges(t, open) })
	t.Run("Health", func(t *testing.T) {
		if err := open(t).Health.Ready(context.Background()); err != nil {
			t.Fatalf("Ready on an open store = %v", err)
		}
	})
}

// t0 is the suite's clock: whole microseconds, UTC.
var t0 = time.Date(2026, 3, 1, 9, 30, 15, 123456000, time.UTC)

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s differs (-want +got):\n%s", what, d)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func sampleSession(id string) session.Session {
	return session.Session{
		ID: id, TaskID: "task-42", TokenID: "jti_" + id, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
		UntrustedInput: true, Isolation: session.IsolationGVisor, BindCIDR: "10.1.2.0/24",
		Labels: map[string]string{"team": "payments", "run": "7"}, CreatedBy: "tok_operator",
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

func sampleGrant(id, sessionID string) grants.Grant {
	return grants.Grant{
		ID: id, SessionID: sessionID, TaskID: "task-42", CreatedAt: t0, ExpiresAt: t0.Add(30 * time.Minute), CreatedBy: "tok_operator",
		Spec: grants.Spec{
			Upstream: "pay", TTL: 30 * time.Minute, MaxUses: 10, Approval: grants.ApprovalAlways, ApprovalsRequired: 2,
			Budget: map[string]float64{"body.amount": 1000},
			Rules: []grants.Rule{{
				Method: "POST", Path: "/accounts/{account}/payments", Irreversible: ptr(true), DenyUnknown: true,
				Constraints: map[string]grants.Constraint{
					"path.account":  {Pin: "acct-1"},
					"body.amount":   {Min: ptr(1.0), Max: ptr(500.0), Required: true},
					"body.currency": {OneOf: []any{"EUR", "USD"}},
					"body.to":       {Pattern: "[a-z]+", MaxLength: ptr(40)},
				},
			}, {Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/*"},
				{Tool: "create_issue", Constraints: map[string]grants.Constraint{"args.labels.*": {OneOf: []any{"bug"}}}}},
		},
	}
}

func testSessions(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()

	t.Run("NotFound", func(t *testing.T) {
		p := open(t)
		if _, err := p.Sessions.Session(ctx, "ses_unknown"); !errors.Is(err, sessions.ErrNotFound) {
			t.Errorf("Session(unknown) = %v, want sessions.ErrNotFound", err)
		}
		if _, err := p.Sessions.Grant(ctx, "grt_unknown"); !errors.Is(err, sessions.ErrNotFound) {
			t.Errorf("Grant(unknown) = %v, want sessions.ErrNotFound", err)
		}
		s := sampleSession("ses_1")
		g := sampleGrant("grt_1", s.ID)
		must(t, p.Sessions.CreateSession(ctx, &s, []grants.Grant{g}))
		if _, err := p.Sessions.Session(ctx, g.ID); !errors.Is(err, sessions.ErrNotFound) {
			t.Errorf("Session(a grant's id) = %v, want sessions.ErrNotFound", err)
		}
		if _, err := p.Sessions.Grant(ctx, s.ID); !errors.Is(err, sessions.ErrNotFound) {
			t.Errorf("Grant(a session's id) = %v, want sessions.ErrNotFound", err)
		}
		if gs, err := p.Sessions.SessionGrants(ctx, "ses_unknown"); err != nil || len(gs) != 0 {
			t.Errorf("SessionGrants(unknown) = %v, %v; want none, no error", gs, err)
		}
	})

	t.Run("CreateSessionRoundTrip", func(t *testing.T) {
		p := open(t)
		s := sampleSession("ses_1")
		g1, g2 := sampleGrant("grt_1", s.ID), sampleGrant("grt_2", s.ID)
		g2.Spec = grants.Spec{Upstream: "gh", Rules: []grants.Rule{{Method: "GET", Path: "/repos/{owner}/{repo}"}}}
		must(t, p.Sessions.CreateSession(ctx, &s, []grants.Grant{g1, g2}))
		got, err := p.Sessions.Session(ctx, s.ID)
		must(t, err)
		diff(t, "session", s, got)
		recs, err := p.Sessions.SessionGrants(ctx, s.ID)
		must(t, err)
		// In id (creation) order, with no usage yet.
		diff(t, "session's grants", []sessions.GrantRecord{{Grant: g1}, {Grant: g2}}, recs)
		r, err := p.Sessions.Grant(ctx, g1.ID)
		must(t, err)
		diff(t, "grant", sessions.GrantRecord{Grant: g1}, r)
	})

	t.Run("PutSessionReplaces", func(t *testing.T) {
		p := open(t)
		s := sampleSession("ses_1")
		must(t, p.Sessions.CreateSession(ctx, &s, nil))
		s.RevokedAt = t0.Add(time.Minute)
		must(t, p.Sessions.PutSession(ctx, &s))
		got, err := p.Sessions.Session(ctx, s.ID)
		must(t, err)
		diff(t, "revoked session", s, got)
		// PutSession also creates.
		s2 := sampleSession("ses_2")
		must(t, p.Sessions.PutSession(ctx, &s2))
		if _, err := p.Sessions.Session(ctx, s2.ID); err != nil {
			t.Errorf("Session after PutSession of a new one: %v", err)
		}
	})

	t.Run("SessionsPageInIDOrder", func(t *testing.T) {
		p := open(t)
		for _, id := range []string{"ses_03", "ses_01", "ses_05", "ses_02", "ses_04"} {
			s := sampleSession(id)
			must(t, p.Sessions.CreateSession(ctx, &s, nil))
		}
		for _, c := range []struct {
			after string
			limit int
			want  []string
		}{
			{"", 2, []string{"ses_01", "ses_02"}},
			{"ses_02", 2, []string{"ses_03", "ses_04"}},
			{"ses_04", 10, []string{"ses_05"}},
			{"ses_05", 10, nil},
			{"ses_025", 10, []string{"ses_03", "ses_04", "ses_05"}}, // after need not exist
		} {
			page, err := p.Sessions.Sessions(ctx, c.after, c.limit)
			must(t, err)
			var ids []string
			for _, s := range page {
				ids = append(ids, s.ID)
			}
			diff(t, fmt.Sprintf("Sessions(%q, %d)", c.after, c.limit), c.want, ids)
		}
	})

	t.Run("SessionGrantsOfOneSessionOnly", func(t *testing.T) {
		p := open(t)
		// One id is a prefix of the other: a store keyed by prefix must not mix them.
		s1, s10 := sampleSession("ses_1"), sampleSession("ses_10")
		must(t, p.Sessions.CreateSession(ctx, &s1, []grants.Grant{sampleGrant("grt_a", s1.ID)}))
		must(t, p.Sessions.CreateSession(ctx, &s10, []grants.Grant{sampleGrant("grt_b", s10.ID)}))
		g := sampleGrant("grt_c", s1.ID) // added later (Broker.AddGrant)
		must(t, p.Sessions.PutGrant(ctx, &g, grants.Usage{}))
		for sid, want := range map[string][]string{s1.ID: {"grt_a", "grt_c"}, s10.ID: {"grt_b"}} {
			recs, err := p.Sessions.SessionGrants(ctx, sid)
			must(t, err)
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.Grant.ID)
			}
			diff(t, "grants of "+sid, want, ids)
		}
	})

	t.Run("PutGrantKeepsTheNewestUsage", func(t *testing.T) {
		p := open(t)
		s := sampleSession("ses_1")
		g := sampleGrant("grt_1", s.ID)
		must(t, p.Sessions.CreateSession(ctx, &s, []grants.Grant{g}))
		u2 := grants.Usage{Uses: 2, Spent: map[string]float64{"body.amount": 70}, Version: 2}
		must(t, p.Sessions.PutGrant(ctx, &g, u2))
		r, err := p.Sessions.Grant(ctx, g.ID)
		must(t, err)
		diff(t, "grant with usage", sessions.GrantRecord{Grant: g, Usage: u2}, r)
		// A grant write carrying an older usage snapshot (a revoke racing
		// with calls) replaces the grant but never the newer usage.
		g.RevokedAt = t0.Add(time.Minute)
		must(t, p.Sessions.PutGrant(ctx, &g, grants.Usage{Uses: 1, Version: 1}))
		r, err = p.Sessions.Grant(ctx, g.ID)
		must(t, err)
		diff(t, "revoked grant with an older snapshot", sessions.GrantRecord{Grant: g, Usage: u2}, r)
		u3 := grants.Usage{Uses: 3, Spent: map[string]float64{"body.amount": 90}, Version: 3}
		must(t, p.Sessions.PutGrant(ctx, &g, u3))
		recs, err := p.Sessions.SessionGrants(ctx, s.ID)
		must(t, err)
		diff(t, "session's grants with a newer snapshot", []sessions.GrantRecord{{Grant: g, Usage: u3}}, recs)
	})
}

func testTokens(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()
	p := open(t)
	if ts, err := p.Tokens.Tokens(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("Tokens of an empty store = %v, %v", ts, err)
	}
	a := auth.Token{ID: "tok_a", Name: "ci", Role: auth.RoleOperator, Digest: []byte{0, 1, 2, 0xfe, 0xff}, CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), CreatedBy: "admin"}
	b := auth.Token{ID: "tok_b", Name: "alice", Role: auth.RoleReviewer, Digest: []byte("digest-b"), CreatedAt: t0, CreatedBy: "admin"} // no expiry
	must(t, p.Tokens.PutToken(ctx, a))
	must(t, p.Tokens.PutToken(ctx, b))
	b.Name = "alice (renamed)"
	must(t, p.Tokens.PutToken(ctx, b)) // replaces
	ts, err := p.Tokens.Tokens(ctx)
	must(t, err)
	diff(t, "tokens", map[string]auth.Token{a.ID: a, b.ID: b}, byID(ts))

	got, err := p.Tokens.Token(ctx, b.ID)
	must(t, err)
	diff(t, "Token(b)", b, got)

	must(t, p.Tokens.DeleteToken(ctx, a.ID))
	if _, err := p.Tokens.Token(ctx, a.ID); !errors.Is(err, apitokens.ErrNotFound) {
		t.Errorf("Token(deleted) = %v, want apitokens.ErrNotFound", err)
	}
	ts, err = p.Tokens.Tokens(ctx)
	must(t, err)
	diff(t, "tokens after a delete", map[string]auth.Token{b.ID: b}, byID(ts))
	if err := p.Tokens.DeleteToken(ctx, a.ID); !errors.Is(err, apitokens.ErrNotFound) {
		t.Errorf("DeleteToken(deleted) = %v, want apitokens.ErrNotFound", err)
	}
	if err := p.Tokens.DeleteToken(ctx, "tok_unknown"); !errors.Is(err, apitokens.ErrNotFound) {
		t.Errorf("DeleteToken(unknown) = %v, want apitokens.ErrNotFound", err)
	}
}

func byID(ts []auth.Token) map[string]auth.Token {
	m := make(map[string]auth.Token, len(ts))
	for _, t := range ts {
		m[t.ID] = t
	}
	return m
}

func testMeta(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()
	p := open(t)
	if _, err := p.Meta.Meta(ctx, "installation_secret"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("Meta(never written) = %v, want meta.ErrNotFound", err)
	}
	v := []byte{0, 1, 2, 3, 0xff}
	must(t, p.Meta.PutMeta(ctx, "installation_secret", v))
	v[0] = 9 // the caller's buffer is not the store's
	got, err := p.Meta.Meta(ctx, "installation_secret")
	must(t, err)
	diff(t, "value", []byte{0, 1, 2, 3, 0xff}, got)
	got[1] = 9 // nor is the value returned
	got, err = p.Meta.Meta(ctx, "installation_secret")
	must(t, err)
	diff(t, "value read again", []byte{0, 1, 2, 3, 0xff}, got)

	must(t, p.Meta.PutMeta(ctx, "killswitch", []byte(`{"engaged":true}`)))
	must(t, p.Meta.PutMeta(ctx, "killswitch", []byte(`{"engaged":false}`))) // replaces
	got, err = p.Meta.Meta(ctx, "killswitch")
	must(t, err)
	diff(t, "replaced value", `{"engaged":false}`, string(got))
	if _, err := p.Meta.Meta(ctx, "killswitch2"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("Meta(another key) = %v, want meta.ErrNotFound", err)
	}

	// CreateMeta: created once; a stored value is kept and returned.
	got, err = p.Meta.CreateMeta(ctx, "installation_secret", []byte("other"))
	must(t, err)
	diff(t, "CreateMeta over a stored value", []byte{0, 1, 2, 3, 0xff}, got)
	// Callers racing on an empty key all get the one value that won.
	const racers = 16
	var wg sync.WaitGroup
	won := make([][]byte, racers)
	errs := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i], errs[i] = p.Meta.CreateMeta(ctx, "race", []byte(fmt.Sprintf("value-%d", i)))
		}()
	}
	wg.Wait()
	stored, err := p.Meta.Meta(ctx, "race")
	must(t, err)
	for i := range racers {
		must(t, errs[i])
		if string(won[i]) != string(stored) {
			t.Errorf("racer %d got %q, the store holds %q", i, won[i], stored)
		}
	}
}

func sampleAction(id string, status approval.Status, created time.Time) approval.Action {
	return approval.Action{
		ID: id, SessionID: "ses_1", TaskID: "task-42", GrantID: "grt_1", Upstream: "pay", RequestID: "req_" + id,
		SessionCreatedBy: "tok_operator", CreatedAt: created, ExpiresAt: created.Add(15 * time.Minute), Status: status,
		Request: approval.HeldRequest{Method: "POST", Path: "/accounts/acct-1/payments", Query: "dry=0&x=%2F",
			Header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1", "k2"}},
			Body:   []byte(`{"amount":50,"to":"acme"}` + "\x00\xff")},
		Pinned: []string{"path.account"}, Filled: []string{"path.account"},
		Standing:          approval.Standing{UntrustedInput: true, SensitiveAccess: true, ExternalAction: true},
		ApprovalsRequired: 2, Amounts: map[string]float64{"body.amount": 50}, PermitGrants: []string{"grt_2"},
		MCP: &approval.MCPCall{Tool: "create_issue", Digest: "sha256:ab", Description: "Creates an issue <b>", Annotations: `{"destructiveHint":true}`, Join: "issues/create_issue/00ff",
			Constrained: map[string]string{"args.repo": `"acme/web"`}},
	}
}

func testActions(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()

	t.Run("NotFound", func(t *testing.T) {
		p := open(t)
		if _, err := p.Actions.Action(ctx, "act_unknown"); !errors.Is(err, approval.ErrNotFound) {
			t.Errorf("Action(unknown) = %v, want approval.ErrNotFound", err)
		}
		called := false
		_, err := p.Actions.UpdateAction(ctx, "act_unknown", func(*approval.Action) error { called = true; return nil })
		if !errors.Is(err, approval.ErrNotFound) || called {
			t.Errorf("UpdateAction(unknown) = %v (fn called: %v), want approval.ErrNotFound without calling fn", err, called)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		p := open(t)
		a := sampleAction("act_1", approval.Pending, t0)
		must(t, p.Actions.PutAction(ctx, &a))
		got, err := p.Actions.Action(ctx, a.ID)
		must(t, err)
		diff(t, "pending action", a, got)
		a.Status, a.Reason = approval.Executed, ""
		a.Decisions = []approval.Review{{Reviewer: "tok_r1", Name: "r1", Verdict: "approve", Comment: "ok", At: t0.Add(time.Second)},
			{Reviewer: "tok_r2", Name: "r2", Verdict: "approve", At: t0.Add(2 * time.Second)}}
		a.Result = &approval.Result{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"p_1"}`),
			Truncated: true, Code: "", ExecutedAt: t0.Add(3 * time.Second), LatencyUS: 1234}
		must(t, p.Actions.PutAction(ctx, &a)) // replaces
		got, err = p.Actions.Action(ctx, a.ID)
		must(t, err)
		diff(t, "executed action", a, got)
	})

	t.Run("ListNewestFirstByStatus", func(t *testing.T) {
		p := open(t)
		if n, oldest, err := p.Actions.PendingSummary(ctx); err != nil || n != 0 || !oldest.IsZero() {
			t.Fatalf("PendingSummary of none = %d, %v, %v; want 0, zero time", n, oldest, err)
		}
		// Ids are time-ordered (the broker's newID): act_1 is the oldest.
		for i, st := range []approval.Status{approval.Pending, approval.Denied, approval.Pending, approval.Executed, approval.Pending} {
			a := sampleAction(fmt.Sprintf("act_%d", i+1), st, t0.Add(time.Duration(i)*time.Second))
			must(t, p.Actions.PutAction(ctx, &a))
		}
		for _, c := range []struct {
			status approval.Status
			limit  int
			want   []string
		}{
			{"", 0, []string{"act_5", "act_4", "act_3", "act_2", "act_1"}},
			{"", 2, []string{"act_5", "act_4"}},
			{approval.Pending, 0, []string{"act_5", "act_3", "act_1"}},
			{approval.Pending, 2, []string{"act_5", "act_3"}},
			{approval.Denied, 0, []string{"act_2"}},
			{approval.Failed, 0, nil},
		} {
			as, err := p.Actions.Actions(ctx, c.status, c.limit)
			must(t, err)
			var ids []string
			for _, a := range as {
				ids = append(ids, a.ID)
			}
			diff(t, fmt.Sprintf("Actions(%q, %d)", c.status, c.limit), c.want, ids)
		}
		n, oldest, err := p.Actions.PendingSummary(ctx)
		if err != nil || n != 3 || !oldest.Equal(t0) {
			t.Errorf("PendingSummary = %d, %v, %v; want 3, %v", n, oldest, err, t0)
		}
		// The oldest leaves pending: it is listed and counted no more.
		_, err = p.Actions.UpdateAction(ctx, "act_1", func(a *approval.Action) error { a.Status = approval.Expired; return nil })
		must(t, err)
		as, err := p.Actions.Actions(ctx, approval.Pending, 0)
		if err != nil || len(as) != 2 || as[0].ID != "act_5" || as[1].ID != "act_3" {
			t.Errorf("pending after act_1 expired = %d actions, %v", len(as), err)
		}
		n, oldest, err = p.Actions.PendingSummary(ctx)
		if want := t0.Add(2 * time.Second); err != nil || n != 2 || !oldest.Equal(want) {
			t.Errorf("PendingSummary after act_1 expired = %d, %v, %v; want 2, %v", n, oldest, err, want)
		}
	})

	t.Run("UpdateAction", func(t *testing.T) {
		p := open(t)
		a := sampleAction("act_1", approval.Pending, t0)
		must(t, p.Actions.PutAction(ctx, &a))
		// fn's error is returned and nothing is stored.
		errNo := errors.New("no change")
		_, err := p.Actions.UpdateAction(ctx, a.ID, func(x *approval.Action) error {
			x.Status, x.Reason = approval.Denied, "should not stay"
			return errNo
		})
		if !errors.Is(err, errNo) {
			t.Errorf("UpdateAction with fn failing = %v, want fn's error", err)
		}
		got, err := p.Actions.Action(ctx, a.ID)
		must(t, err)
		diff(t, "action after a failed update", a, got)
		// fn sees the stored action; what it made is stored and returned.
		upd, err := p.Actions.UpdateAction(ctx, a.ID, func(x *approval.Action) error {
			if x.RequestID != a.RequestID || x.Status != approval.Pending {
				return fmt.Errorf("fn saw %+v", x)
			}
			x.Status, x.Reason = approval.Denied, "denied by r1"
			return nil
		})
		must(t, err)
		a.Status, a.Reason = approval.Denied, "denied by r1"
		diff(t, "UpdateAction's answer", a, upd)
		got, err = p.Actions.Action(ctx, a.ID)
		must(t, err)
		diff(t, "stored action", a, got)
	})

	// Each UpdateAction runs on the latest stored action, one at a time:
	// no concurrent update is lost, and exactly one caller wins a
	// transition (the "executing" claim that makes execution exactly once).
	t.Run("UpdatesSerialize", func(t *testing.T) {
		p := open(t)
		a := sampleAction("act_1", approval.Pending, t0)
		a.ApprovalsRequired = 100
		must(t, p.Actions.PutAction(ctx, &a))
		const n = 8
		errUnchanged := errors.New("unchanged")
		var wg sync.WaitGroup
		start := make(chan struct{})
		wins := make(chan int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := p.Actions.UpdateAction(ctx, a.ID, func(x *approval.Action) error {
					x.Decisions = append(x.Decisions, approval.Review{Reviewer: fmt.Sprint("r", i), Verdict: "approve", At: t0})
					return nil
				})
				if err != nil {
					t.Errorf("decision %d: %v", i, err)
				}
				_, err = p.Actions.UpdateAction(ctx, a.ID, func(x *approval.Action) error {
					if x.Status != approval.Pending {
						return errUnchanged
					}
					x.Status = approval.Executing
					return nil
				})
				switch {
				case err == nil:
					wins <- i
				case !errors.Is(err, errUnchanged):
					t.Errorf("claim %d: %v", i, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(wins)
		if got := len(wins); got != 1 {
			t.Errorf("%d callers claimed the action, want exactly 1", got)
		}
		got, err := p.Actions.Action(ctx, a.ID)
		must(t, err)
		if len(got.Decisions) != n || got.Status != approval.Executing {
			t.Errorf("after %d concurrent decisions: %d decisions, status %s", n, len(got.Decisions), got.Status)
		}
	})
}

func testAudit(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	longID := "ses_" + strings.Repeat("x", 2000) // beyond what an index may key

	t.Run("Empty", func(t *testing.T) {
		p := open(t)
		seq, head, err := p.Audit.AuditHead(ctx)
		if err != nil || seq != 0 || head != "" {
			t.Errorf("AuditHead of an empty log = %d, %q, %v", seq, head, err)
		}
		fail := func(uint64, []byte) error { return errors.New("called") }
		for _, sid := range []string{"ses_unknown", "", longID} {
			if err := p.Audit.ScanSessionAudit(ctx, sid, 0, fail); err != nil {
				t.Errorf("ScanSessionAudit(%.12q) = %v, want no record and no error", sid, err)
			}
			if err := p.Audit.LastSessionAudit(ctx, sid, 10, fail); err != nil {
				t.Errorf("LastSessionAudit(%.12q) = %v, want no record and no error", sid, err)
			}
		}
		if err := p.Audit.ScanAudit(ctx, 0, fail); err != nil {
			t.Errorf("ScanAudit of an empty log = %v", err)
		}
	})

	// The chain as the broker writes it (audit.Writer over the port):
	// read back whole, from a sequence, and by session from the index.
	t.Run("ChainAndSessionIndex", func(t *testing.T) {
		p := open(t)
		w, err := audit.NewWriter(ctx, p.Audit, func() time.Time { return t0 }, discard)
		must(t, err)
		sessions := []string{"ses_a", "ses_b", "", "ses_a", longID, "ses_ab", "ses_a", "", "ses_b", longID}
		bySession := map[string][]uint64{}
		for _, sid := range sessions {
			ev, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: sid}, nil)
			must(t, err)
			bySession[sid] = append(bySession[sid], ev.Seq)
		}
		w.Close()
		var v audit.Verifier
		var seqs []uint64
		must(t, p.Audit.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
			seqs = append(seqs, seq)
			return v.Next(data)
		}))
		if v.Count() != uint64(len(sessions)) || seqs[0] != 1 || seqs[len(seqs)-1] != uint64(len(sessions)) {
			t.Fatalf("ScanAudit read %d records (%v), want %d from 1", v.Count(), seqs, len(sessions))
		}
		seq, head, err := p.Audit.AuditHead(ctx)
		if err != nil || seq != uint64(len(sessions)) || head != v.Head() {
			t.Errorf("AuditHead = %d, %q, %v; want %d, %q", seq, head, err, len(sessions), v.Head())
		}
		seqs = nil
		must(t, p.Audit.ScanAudit(ctx, 7, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }))
		diff(t, "ScanAudit from 7", []uint64{7, 8, 9, 10}, seqs)

		for _, sid := range []string{"ses_a", "ses_b", "ses_ab", longID} {
			var got []uint64
			must(t, p.Audit.ScanSessionAudit(ctx, sid, 0, func(seq uint64, data []byte) error {
				if !strings.Contains(string(data), `"session_id":"`+sid+`"`) {
					t.Errorf("record %d in %.12q's scan is not its own", seq, sid)
				}
				got = append(got, seq)
				return nil
			}))
			diff(t, fmt.Sprintf("ScanSessionAudit(%.12q)", sid), bySession[sid], got)
			got = nil
			must(t, p.Audit.LastSessionAudit(ctx, sid, 2, func(seq uint64, _ []byte) error { got = append(got, seq); return nil }))
			want := bySession[sid]
			var last []uint64
			for i := len(want) - 1; i >= 0 && len(last) < 2; i-- {
				last = append(last, want[i])
			}
			diff(t, fmt.Sprintf("LastSessionAudit(%.12q, 2)", sid), last, got)
		}
		var got []uint64
		must(t, p.Audit.ScanSessionAudit(ctx, "ses_a", 5, func(seq uint64, _ []byte) error { got = append(got, seq); return nil }))
		diff(t, "ScanSessionAudit(ses_a, from 5)", []uint64{7}, got)

		// fn's error stops a scan and is returned.
		errStop := errors.New("stop")
		n := 0
		err = p.Audit.ScanAudit(ctx, 0, func(uint64, []byte) error { n++; return errStop })
		if !errors.Is(err, errStop) || n != 1 {
			t.Errorf("ScanAudit with fn failing = %v after %d records, want fn's error after 1", err, n)
		}
		n = 0
		err = p.Audit.ScanSessionAudit(ctx, "ses_a", 0, func(uint64, []byte) error { n++; return errStop })
		if !errors.Is(err, errStop) || n != 1 {
			t.Errorf("ScanSessionAudit with fn failing = %v after %d records, want fn's error after 1", err, n)
		}

		// A new writer continues the chain from the stored head.
		w2, err := audit.NewWriter(ctx, p.Audit, func() time.Time { return t0 }, discard)
		must(t, err)
		ev, err := w2.Append(ctx, audit.Event{Type: audit.TypeBrokerStarted}, nil)
		w2.Close()
		if err != nil || ev.Seq != uint64(len(sessions))+1 || ev.PrevHash != v.Head() {
			t.Errorf("continued record = seq %d prev %q, %v; want seq %d prev %q", ev.Seq, ev.PrevHash, err, len(sessions)+1, v.Head())
		}
	})

	// A grant's usage written with a call's record (audit.Entry.Side) is
	// the grant's usage once the record is durable; an older snapshot
	// sequenced later does not replace it.
	t.Run("UsageRidesWithTheRecord", func(t *testing.T) {
		p := open(t)
		s := sampleSession("ses_1")
		g := sampleGrant("grt_1", s.ID)
		must(t, p.Sessions.CreateSession(ctx, &s, []grants.Grant{g}))
		w, err := audit.NewWriter(ctx, p.Audit, func() time.Time { return t0 }, discard)
		must(t, err)
		defer w.Close()
		u5 := grants.Usage{Uses: 5, Spent: map[string]float64{"body.amount": 250}, Version: 5}
		_, err = w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: s.ID, GrantID: g.ID}, &grants.UsageUpdate{GrantID: g.ID, Usage: u5})
		must(t, err)
		_, err = w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: s.ID, GrantID: g.ID}, &grants.UsageUpdate{GrantID: g.ID, Usage: grants.Usage{Uses: 4, Version: 4}})
		must(t, err)
		r, err := p.Sessions.Grant(ctx, g.ID)
		must(t, err)
		diff(t, "usage after the records", u5, r.Usage)
		recs, err := p.Sessions.SessionGrants(ctx, s.ID)
		must(t, err)
		diff(t, "session's grants after the records", []sessions.GrantRecord{{Grant: g, Usage: u5}}, recs)
	})

	t.Run("CheckpointsAndPrune", func(t *testing.T) {
		p := open(t)
		w, err := audit.NewWriter(ctx, p.Audit, func() time.Time { return t0 }, discard)
		must(t, err)
		var hashes []string
		for i := range 6 {
			ev, err := w.Append(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: []string{"ses_a", "ses_b"}[i%2]}, nil)
			must(t, err)
			hashes = append(hashes, ev.Hash)
		}
		w.Close()
		// A checkpoint's time is part of what its signature covers: it is
		// kept to the nanosecond, not to the microsecond as other times.
		c4 := audit.Checkpoint{Seq: 4, Hash: hashes[3], Time: t0.Add(2*time.Second + 789), Signature: "c2ln"}
		c2 := audit.Checkpoint{Seq: 2, Hash: hashes[1], Time: t0.Add(time.Second), Signature: "c2ln"}
		must(t, p.Audit.PutCheckpoint(ctx, c4))
		must(t, p.Audit.PutCheckpoint(ctx, c2))
		cps, err := p.Audit.Checkpoints(ctx)
		must(t, err)
		diff(t, "checkpoints (by seq)", []audit.Checkpoint{c2, c4}, cps)

		anchor := audit.Checkpoint{Seq: 3, Hash: hashes[2], Time: t0.Add(3 * time.Second), Anchor: true, Signature: "c2ln"}
		n, err := p.Audit.PruneAudit(ctx, anchor)
		if err != nil || n != 3 {
			t.Fatalf("PruneAudit through 3 = %d, %v; want 3", n, err)
		}
		var seqs []uint64
		must(t, p.Audit.ScanAudit(ctx, 0, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }))
		diff(t, "records after pruning", []uint64{4, 5, 6}, seqs)
		cps, err = p.Audit.Checkpoints(ctx)
		must(t, err)
		// The checkpoints before the anchor named records that are gone.
		diff(t, "checkpoints after pruning", []audit.Checkpoint{anchor, c4}, cps)
		seqs = nil
		must(t, p.Audit.ScanSessionAudit(ctx, "ses_a", 0, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }))
		diff(t, "ses_a's records after pruning", []uint64{5}, seqs)
		seqs = nil
		must(t, p.Audit.LastSessionAudit(ctx, "ses_b", 10, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }))
		diff(t, "ses_b's last records after pruning", []uint64{6, 4}, seqs)
		seq, head, err := p.Audit.AuditHead(ctx)
		if err != nil || seq != 6 || head != hashes[5] {
			t.Errorf("AuditHead after pruning = %d, %q, %v; want 6, %q", seq, head, err, hashes[5])
		}
	})
}
