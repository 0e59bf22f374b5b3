package boltstore_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
)

// TestRecordsKeepTheStoredNames: what the store writes now is, field for
// field, what the store wrote before it had record types (json.Marshal of
// the domain structs, which older files hold), plus "schema": 1. It also
// fails when a domain type gains a field its record does not store.
func TestRecordsKeepTheStoredNames(t *testing.T) {
	ctx := context.Background()
	d := legacyFixture()
	s := MustOpen(t, store.DurabilityBuffered)
	type row struct {
		name   string
		bucket string
		key    []byte
		legacy any // the domain value, as the old store marshalled it
	}
	var rows []row
	for i := range d.sessions {
		if err := s.PutSession(ctx, &d.sessions[i]); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{"session " + d.sessions[i].ID, "sessions", []byte(d.sessions[i].ID), d.sessions[i]})
	}
	for i := range d.grants {
		g := &d.grants[i]
		if err := s.PutGrant(ctx, &g.Grant, g.Usage); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{"grant " + g.Grant.ID, "grants", []byte(g.Grant.ID), g.Grant},
			row{"usage " + g.Grant.ID, "usage", []byte(g.Grant.ID), g.Usage})
	}
	for _, tk := range d.tokens {
		if err := s.PutToken(ctx, tk); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{"token " + tk.ID, "tokens", []byte(tk.ID), tk})
	}
	for i := range d.actions {
		if err := s.PutAction(ctx, &d.actions[i]); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{"action " + d.actions[i].ID, "actions", []byte(d.actions[i].ID), d.actions[i]})
	}
	for _, c := range d.checkpoints {
		if err := s.PutCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{"checkpoint", "audit_checkpoints", binary.BigEndian.AppendUint64(nil, c.Seq), c})
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var stored []byte
			if err := s.DB().View(func(tx *bolt.Tx) error {
				stored = append(stored, tx.Bucket([]byte(r.bucket)).Get(r.key)...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := json.Unmarshal(stored, &got); err != nil {
				t.Fatalf("stored %q: %v", stored, err)
			}
			legacy, err := json.Marshal(r.legacy)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(legacy, &want); err != nil {
				t.Fatal(err)
			}
			if got["schema"] != 1.0 {
				t.Errorf("schema = %v, want 1", got["schema"])
			}
			delete(got, "schema")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stored fields differ from the pre-schema format (-old +new):\n%s", diff)
			}
		})
	}
}

// TestRecordFromANewerSchemaIsRefused: a record written by a later broker
// (a schema this one does not know) is an error, not a half-read value.
func TestRecordFromANewerSchemaIsRefused(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityBuffered)
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("sessions")).Put([]byte("ses_9"), []byte(`{"schema":2,"ID":"ses_9"}`))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, "ses_9"); err == nil {
		t.Fatal("a schema-2 session was read by a schema-1 store")
	}
}

// TestSessionProxyCARecord: a session's CA (certificate and sealed key)
// and its placeholders round-trip; a record written before them loads
// with neither.
func TestSessionProxyCARecord(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, store.DurabilityBuffered)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	want := session.Session{ID: "ses_ca", TaskID: "t", TokenID: "jti", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
		ProxyCA:      &session.ProxyCA{CertDER: []byte{0x30, 1, 2}, SealedKey: []byte{1, 9, 9}},
		Placeholders: map[string]string{"GITHUB_TOKEN": "ghp_x"}}
	if err := s.PutSession(ctx, &want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Session(ctx, "ses_ca")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("sessions")).Put([]byte("ses_old"), []byte(`{"schema":1,"ID":"ses_old","TaskID":"t"}`))
	}); err != nil {
		t.Fatal(err)
	}
	old, err := s.Session(ctx, "ses_old")
	if err != nil {
		t.Fatal(err)
	}
	if old.ProxyCA != nil || old.Placeholders != nil {
		t.Errorf("an older record loads with a CA or placeholders: %+v", old)
	}
}
