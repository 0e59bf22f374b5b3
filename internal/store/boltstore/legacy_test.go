package boltstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"github.com/airlock-broker/airlock/internal/sessions"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

// writeLegacy regenerates testdata/legacy: a bbolt file and an audit journal
// written by the store before it had explicit record types (json.Marshal of
// the domain structs). It was run once, on that code; do not regenerate it
// with a later store, or the test stops testing the old format.
var writeLegacy = flag.Bool("store.writelegacy", false, "rewrite testdata/legacy with the current code (only ever with the pre-schema store)")

// legacyData is what testdata/legacy holds.
type legacyData struct {
	sessions    []session.Session
	grants      []sessions.GrantRecord
	tokens      []auth.Token
	actions     []approval.Action // oldest first
	checkpoints []audit.Checkpoint
	meta        map[string][]byte
	// audit records: the first applied are in the bbolt file, the rest only
	// in the journal (acknowledged, then a crash before the applier ran).
	applied, journaled []legacyEvent
}

type legacyEvent struct {
	Type, SessionID string
	Usage           *grants.UsageUpdate
}

func legacyFixture() legacyData {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.UTC)
	yes := true
	minimum, maximum, maxLen := 1.5, 99.0, 12
	ses := func(id string, untrusted bool, iso session.Isolation) session.Session {
		return session.Session{ID: id, TaskID: "task-" + id, TokenID: "jti_" + id, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
			UntrustedInput: untrusted, Isolation: iso, BindCIDR: "10.0.0.0/8", Labels: map[string]string{"team": "red", "run": id}, CreatedBy: "tok_ops"}
	}
	revoked := ses("ses_03", false, session.IsolationProcess)
	revoked.RevokedAt, revoked.BindCIDR, revoked.Labels = t0.Add(time.Minute), "", nil
	d := legacyData{
		sessions: []session.Session{ses("ses_01", true, session.IsolationMicroVM), ses("ses_02", false, session.IsolationContainer), revoked},
		grants: []sessions.GrantRecord{
			{Grant: grants.Grant{ID: "grt_01", SessionID: "ses_01", TaskID: "task-ses_01", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), CreatedBy: "tok_ops",
				Spec: grants.Spec{Upstream: "github", TTL: 30 * time.Minute, MaxUses: 10, Approval: grants.ApprovalAlways, ApprovalsRequired: 2,
					Budget: map[string]float64{"body.amount": 100},
					Rules: []grants.Rule{
						{Method: "POST", Path: "/repos/{owner}/{repo}/issues", Irreversible: &yes, DenyUnknown: true, Constraints: map[string]grants.Constraint{
							"owner":       {Pin: "acme", Required: true},
							"body.amount": {Min: &minimum, Max: &maximum},
							"body.title":  {Pattern: "^[a-z ]+$", MaxLength: &maxLen},
							"body.labels": {OneOf: []any{"bug", 3.0, true}},
						}},
						{Method: "GET", Path: "/repos/{owner}/{repo}"},
					}}},
				Usage: grants.Usage{Uses: 3, Spent: map[string]float64{"body.amount": 42.5}, Version: 7}},
			{Grant: grants.Grant{ID: "grt_02", SessionID: "ses_02", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), RevokedAt: t0.Add(2 * time.Minute),
				Spec: grants.Spec{Upstream: "s3", Rules: []grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::bucket/*"}}}}},
		},
		tokens: []auth.Token{
			{ID: "tok_ops", Name: "ops", Role: "operator", Digest: []byte{0, 1, 2, 0xfe, 0xff}, CreatedAt: t0, CreatedBy: "bootstrap"},
			{ID: "tok_rev", Name: "alice", Role: "reviewer", Digest: []byte("digest"), CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), CreatedBy: "tok_ops"},
		},
		actions: []approval.Action{
			{ID: "act_0001", SessionID: "ses_01", TaskID: "task-ses_01", GrantID: "grt_01", Upstream: "github", RequestID: "req_1", SessionCreatedBy: "tok_ops",
				CreatedAt: t0, ExpiresAt: t0.Add(15 * time.Minute), Status: approval.Executed, Reason: "irreversible",
				Request: approval.HeldRequest{Method: "POST", Path: "/repos/acme/w/issues", Query: "a=1", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"title":"x"}`)},
				Pinned:  []string{"owner"}, Filled: []string{"owner"}, Standing: approval.Standing{UntrustedInput: true, SensitiveAccess: true, ExternalAction: true},
				ApprovalsRequired: 1, Amounts: map[string]float64{"body.amount": 5}, PermitGrants: []string{"grt_02"},
				Decisions: []approval.Review{{Reviewer: "tok_rev", Name: "alice", Verdict: "approve", Comment: "ok", At: t0.Add(time.Minute)}},
				Result:    &approval.Result{Status: 201, Header: http.Header{"X-Id": {"7"}}, Body: []byte("created"), Truncated: true, Code: "", ExecutedAt: t0.Add(2 * time.Minute), LatencyUS: 1234}},
			{ID: "act_0002", SessionID: "ses_01", GrantID: "grt_01", Upstream: "github", CreatedAt: t0.Add(time.Second), ExpiresAt: t0.Add(16 * time.Minute),
				Status: approval.Pending, Request: approval.HeldRequest{Method: "DELETE", Path: "/repos/acme/w"}, ApprovalsRequired: 2},
		},
		checkpoints: []audit.Checkpoint{{Seq: 4, Hash: "abc", Time: t0, Signature: "c2ln"}, {Seq: 6, Hash: "def", Time: t0.Add(time.Second), Anchor: true, Signature: "c2lnMg=="}},
		meta:        map[string][]byte{"killswitch": []byte(`{"engaged":true}`), "secret": {0, 1, 2, 3}},
		applied: []legacyEvent{
			{Type: audit.TypeBrokerStarted},
			{Type: audit.TypeSessionCreated, SessionID: "ses_01"},
			{Type: audit.TypeSessionCreated, SessionID: "ses_02"},
			{Type: audit.TypeCallAllowed, SessionID: "ses_01", Usage: &grants.UsageUpdate{GrantID: "grt_01", Usage: grants.Usage{Uses: 1, Spent: map[string]float64{"body.amount": 10}, Version: 1}}},
			{Type: audit.TypeCallDenied, SessionID: "ses_02"},
			{Type: audit.TypeCallCompleted, SessionID: "ses_01"},
		},
		journaled: []legacyEvent{
			{Type: audit.TypeCallAllowed, SessionID: "ses_01", Usage: &grants.UsageUpdate{GrantID: "grt_01", Usage: grants.Usage{Uses: 3, Spent: map[string]float64{"body.amount": 42.5}, Version: 7}}},
			{Type: audit.TypeSessionRevoked, SessionID: "ses_03"},
			{Type: audit.TypeTokenCreated},
		},
	}
	return d
}

// TestWriteLegacyFixture writes testdata/legacy (see writeLegacy).
func TestWriteLegacyFixture(t *testing.T) {
	if !*writeLegacy {
		t.Skip("run with -store.writelegacy, only on the pre-schema store")
	}
	ctx := context.Background()
	d := legacyFixture()
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.db")
	s, err := boltstore.OpenBolt(path, store.DurabilityFsync, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range d.sessions {
		if err := s.PutSession(ctx, &d.sessions[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The first grant at its final usage: the journaled record's usage
	// equals it (a replay must not lower it, nor the applied older one).
	for i := range d.grants {
		if err := s.PutGrant(ctx, &d.grants[i].Grant, d.grants[i].Usage); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range d.tokens {
		if err := s.PutToken(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	for i := range d.actions {
		a := d.actions[i]
		if err := s.PutAction(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range d.meta {
		if err := s.PutMeta(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	now := func() time.Time { return time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) }
	w, err := audit.NewWriter(ctx, s, now, discard)
	if err != nil {
		t.Fatal(err)
	}
	appendAll := func(evs []legacyEvent) {
		for _, e := range evs {
			var side *grants.UsageUpdate
			if e.Usage != nil {
				side = e.Usage
			}
			if _, err := w.Append(ctx, audit.Event{Type: e.Type, Actor: audit.Actor{Kind: "system"}, SessionID: e.SessionID}, side); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendAll(d.applied)
	for _, c := range d.checkpoints {
		if err := s.PutCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.AuditHead(ctx); err != nil { // flushes the journal into bbolt
		t.Fatal(err)
	}
	out := filepath.Join("testdata", "legacy")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(out, "airlock.db"))
	if err := s.DB().View(func(tx *bolt.Tx) error { return tx.CopyFile(filepath.Join(out, "airlock.db"), 0o600) }); err != nil {
		t.Fatal(err)
	}
	// More records acknowledged but not applied: the journal file holds
	// every record since the store opened (the applied ones are skipped on
	// replay). Its preallocated zeros are cut off.
	appendAll(d.journaled)
	j, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "airlock.db.journal"), bytes.TrimRight(j, "\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// TestLegacyFileLoads opens a bbolt file and journal written by the store
// before it had explicit record types, and reads everything back.
func TestLegacyFileLoads(t *testing.T) {
	ctx := context.Background()
	d := legacyFixture()
	dir := t.TempDir()
	for _, name := range []string{"airlock.db", "airlock.db.journal"} {
		b, err := os.ReadFile(filepath.Join("testdata", "legacy", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "airlock.db")
	s, err := boltstore.OpenBolt(path, store.DurabilityFsync, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		CheckConsistency(t, path)
	}()

	stored, err := s.Sessions(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.sessions, stored); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	for _, want := range d.sessions {
		got, err := s.Session(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("session %s (-want +got):\n%s", want.ID, diff)
		}
	}
	for _, want := range d.grants {
		got, err := s.Grant(ctx, want.Grant.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("grant %s (-want +got):\n%s", want.Grant.ID, diff)
		}
		bySession, err := s.SessionGrants(ctx, want.Grant.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]sessions.GrantRecord{want}, bySession); diff != "" {
			t.Errorf("grants of %s (-want +got):\n%s", want.Grant.SessionID, diff)
		}
	}
	tokens, err := s.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.tokens, tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	all, err := s.Actions(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	newestFirst := []approval.Action{d.actions[1], d.actions[0]}
	if diff := cmp.Diff(newestFirst, all); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	pending, err := s.Actions(ctx, approval.Pending, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.actions[1:], pending); diff != "" {
		t.Errorf("pending actions (-want +got):\n%s", diff)
	}
	// The pending index of the old store holds no creation times.
	if n, oldest, err := s.PendingSummary(ctx); err != nil || n != 1 || !oldest.Equal(d.actions[1].CreatedAt) {
		t.Errorf("PendingSummary = %d, %v, %v; want 1, %v", n, oldest, err, d.actions[1].CreatedAt)
	}
	// A pending action written by the old store still leaves pending.
	if _, err := s.UpdateAction(ctx, "act_0002", func(a *approval.Action) error { a.Status = approval.Denied; return nil }); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.Actions(ctx, approval.Pending, 0); err != nil || len(pending) != 0 {
		t.Errorf("pending after the decision: %v %v", pending, err)
	}
	cps, err := s.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.checkpoints, cps); diff != "" {
		t.Errorf("checkpoints (-want +got):\n%s", diff)
	}
	for k, want := range d.meta {
		got, err := s.Meta(ctx, k)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("meta %s = %q, %v; want %q", k, got, err, want)
		}
	}

	// The audit chain: the applied records and the journal's replayed ones,
	// in order, verifying, with the journaled usage applied.
	var v audit.Verifier
	var got []legacyEvent
	err = s.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
		if err := v.Next(data); err != nil {
			return err
		}
		var e audit.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		got = append(got, legacyEvent{Type: e.Type, SessionID: e.SessionID})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []legacyEvent
	for _, e := range append(append([]legacyEvent(nil), d.applied...), d.journaled...) {
		want = append(want, legacyEvent{Type: e.Type, SessionID: e.SessionID})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit records (-want +got):\n%s", diff)
	}
	if seq, _, err := s.AuditHead(ctx); err != nil || seq != uint64(len(want)) {
		t.Errorf("audit head = %d, %v; want %d", seq, err, len(want))
	}

	// The file had no session index: it is built on open, and the journal's
	// replayed records are in it too.
	for _, sid := range []string{"ses_01", "ses_02", "ses_03"} {
		var wantSeqs, gotSeqs []uint64
		for i, e := range want {
			if e.SessionID == sid {
				wantSeqs = append(wantSeqs, uint64(i+1))
			}
		}
		if err := s.ScanSessionAudit(ctx, sid, 0, func(seq uint64, _ []byte) error { gotSeqs = append(gotSeqs, seq); return nil }); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantSeqs, gotSeqs); diff != "" {
			t.Errorf("records of %s through the index (-want +got):\n%s", sid, diff)
		}
	}
}
