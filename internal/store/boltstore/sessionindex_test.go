package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/store"
)

// sidRecord is an audit record as the audit writer encodes it (byte for
// byte encoding/json's form of audit.Event).
func sidRecord(t testing.TB, e audit.Event) []byte {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRecordSessionID: the index reads session_id without decoding the
// record, and reads what encoding/json reads, whatever the other fields hold.
func TestRecordSessionID(t *testing.T) {
	tests := []struct {
		name string
		ev   audit.Event
	}{
		{name: "plain", ev: audit.Event{SessionID: "ses_0123abcd"}},
		{name: "none", ev: audit.Event{Type: "broker.started"}},
		{name: "actor id spells the field", ev: audit.Event{Actor: audit.Actor{Kind: "sandbox", ID: `x","session_id":"ses_evil`}, SessionID: "ses_real"}},
		{name: "request id spells the field, no session", ev: audit.Event{RequestID: `,"session_id":"ses_evil"`}},
		{name: "request id ends in a backslash", ev: audit.Event{RequestID: `r\`, SessionID: "ses_1"}},
		{name: "escaped quote in the id", ev: audit.Event{SessionID: `ses"x`}},
		{name: "backslash in the id", ev: audit.Event{SessionID: `ses\`}},
		{name: "html and unicode escapes", ev: audit.Event{SessionID: "ses<&>\u2028é"}},
		{name: "control characters", ev: audit.Event{SessionID: "a\nb\x01"}},
		{name: "reason spells the field after it", ev: audit.Event{SessionID: "ses_a", Reason: `","session_id":"ses_b`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := sidRecord(t, tt.ev)
			var want audit.Event
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			got, ok := recordSessionID(data)
			if ok != (want.SessionID != "") || got != want.SessionID {
				t.Fatalf("recordSessionID(%s) = %q, %v; want %q", data, got, ok, want.SessionID)
			}
		})
	}
}

func FuzzRecordSessionID(f *testing.F) {
	f.Add("ses_1", "req_1", "sandbox", `x\"`)
	f.Add(`","session_id":"`, `\`, `"`, "\u2028")
	f.Fuzz(func(t *testing.T, sid, req, actor, reason string) {
		data := sidRecord(t, audit.Event{Actor: audit.Actor{Kind: "sandbox", ID: actor}, RequestID: req, SessionID: sid, Reason: reason})
		var want audit.Event
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got, ok := recordSessionID(data)
		if ok != (want.SessionID != "") || got != want.SessionID {
			t.Fatalf("recordSessionID(%s) = %q, %v; want %q", data, got, ok, want.SessionID)
		}
	})
}

func indexTestStore(t *testing.T, path string) *Bolt {
	t.Helper()
	s, err := OpenBolt(path, store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// indexSeqs lists a session's records through the index, in order.
func indexSeqs(t *testing.T, s *Bolt, sid string, from uint64) []uint64 {
	t.Helper()
	var out []uint64
	err := s.ScanSessionAudit(context.Background(), sid, from, func(seq uint64, data []byte) error {
		if got, _ := recordSessionID(data); got != sid {
			t.Errorf("record %d of session %q listed for %q", seq, got, sid)
		}
		out = append(out, seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func lastSeqs(t *testing.T, s *Bolt, sid string, limit int) []uint64 {
	t.Helper()
	var out []uint64
	if err := s.LastSessionAudit(context.Background(), sid, limit, func(seq uint64, _ []byte) error { out = append(out, seq); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSessionIndex: a session's records, read through the index, are the
// records of the log that name it: in order, from a sequence number, the
// last n newest first, after pruning, and for an id too long to index.
func TestSessionIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	s := indexTestStore(t, path)
	defer func() { s.Close() }()
	long := "ses_" + strings.Repeat("L", maxIndexedSessionID)
	// Sessions a, ab (a prefix of the other) and long, interleaved with
	// records of no session, over many applier batches: a's 1200 records
	// fill several index blocks and more than one read chunk.
	sids := []string{"ses_a", "", "ses_ab", "ses_a", long, "ses_ab", "", "ses_a"}
	want := map[string][]uint64{}
	var seq uint64
	for round := 0; round < 400; round++ {
		var entries []audit.Entry
		for _, sid := range sids {
			seq++
			entries = append(entries, audit.Entry{Seq: seq, Data: sidRecord(t, audit.Event{Seq: seq, Type: "call.allowed", SessionID: sid})})
			want[sid] = append(want[sid], seq)
		}
		if err := s.CommitAudit(ctx, entries); err != nil {
			t.Fatal(err)
		}
		if round%7 == 0 {
			if err := s.flushAudit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sid := range []string{"ses_a", "ses_ab", long} {
		if diff := cmp.Diff(want[sid], indexSeqs(t, s, sid, 0)); diff != "" {
			t.Errorf("records of %.10s (-want +got):\n%s", sid, diff)
		}
		for _, i := range []int{1, 2, 127, 128, 129, 300, len(want[sid]) - 1} {
			for _, from := range []uint64{want[sid][i] - 1, want[sid][i]} { // on a record, and maybe between two
				var fromHere []uint64
				for _, q := range want[sid] {
					if q >= from {
						fromHere = append(fromHere, q)
					}
				}
				if diff := cmp.Diff(fromHere, indexSeqs(t, s, sid, from)); diff != "" {
					t.Errorf("records of %.10s from %d (-want +got):\n%s", sid, from, diff)
				}
			}
		}
		if got := indexSeqs(t, s, sid, seq+1); len(got) != 0 {
			t.Errorf("records of %.10s after the last: %v", sid, got)
		}
		n := len(want[sid])
		newest := []uint64{want[sid][n-1], want[sid][n-2]}
		if diff := cmp.Diff(newest, lastSeqs(t, s, sid, 2)); diff != "" {
			t.Errorf("last 2 of %.10s (-want +got):\n%s", sid, diff)
		}
	}
	if got := indexSeqs(t, s, "ses_nobody", 0); len(got) != 0 {
		t.Errorf("an unknown session lists %v", got)
	}
	if got := indexSeqs(t, s, "", 0); len(got) != 0 {
		t.Errorf("the empty session lists %v", got)
	}
	if got := lastSeqs(t, s, "ses_", 5); len(got) != 0 { // a prefix of real ids
		t.Errorf("a prefix of a session id lists %v", got)
	}

	// Pruning removes the index entries with the records, whole blocks and
	// the start of one.
	const anchor = 8*200 + 3
	if _, err := s.PruneAudit(ctx, audit.Checkpoint{Seq: anchor, Hash: "h", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"ses_a", "ses_ab", long} {
		var left []uint64
		for _, q := range want[sid] {
			if q > anchor {
				left = append(left, q)
			}
		}
		if diff := cmp.Diff(left, indexSeqs(t, s, sid, 0)); diff != "" {
			t.Errorf("records of %.10s after pruning (-want +got):\n%s", sid, diff)
		}
		n := len(left)
		if diff := cmp.Diff([]uint64{left[n-1], left[n-2]}, lastSeqs(t, s, sid, 2)); diff != "" {
			t.Errorf("last 2 of %.10s after pruning (-want +got):\n%s", sid, diff)
		}
	}
	var dangling int
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAuditSessions).ForEach(func(k, v []byte) error {
			if bytes.Equal(k, indexState) {
				return nil
			}
			if binary.BigEndian.Uint64(k[len(k)-8:]) != binary.BigEndian.Uint64(v) {
				t.Errorf("block %q starts at %d, keyed %d", k, binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(k[len(k)-8:]))
			}
			for i := 0; i < len(v); i += 8 {
				if binary.BigEndian.Uint64(v[i:]) <= anchor {
					dangling++
				}
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if dangling != 0 {
		t.Errorf("%d index entries name pruned records", dangling)
	}
}

// TestSessionIndexBuiltOnOpen: a log without the index (written before it
// existed) is indexed when the store opens, and an interrupted build resumes
// where it stopped.
func TestSessionIndexBuiltOnOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	s := indexTestStore(t, path)
	var entries []audit.Entry
	for seq := uint64(1); seq <= 30; seq++ {
		sid := []string{"ses_x", "ses_y", ""}[seq%3]
		entries = append(entries, audit.Entry{Seq: seq, Data: sidRecord(t, audit.Event{Seq: seq, SessionID: sid})})
	}
	if err := s.CommitAudit(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want := indexSeqsAfterReopen(t, path)

	for _, tt := range []struct {
		name  string
		state []byte // nil: the bucket is gone (a pre-index file)
	}{
		{"no index", nil},
		{"build interrupted after seq 12", seqKey(12)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				if err := tx.DeleteBucket(bucketAuditSessions); err != nil {
					return err
				}
				if tt.state == nil {
					return nil
				}
				// What a build that stopped after seq 12 leaves.
				ix, err := tx.CreateBucket(bucketAuditSessions)
				if err != nil {
					return err
				}
				c := tx.Bucket(bucketAudit).Cursor()
				var batch indexBatch
				for k, v := c.First(); k != nil && binary.BigEndian.Uint64(k) <= 12; k, v = c.Next() {
					batch.add(binary.BigEndian.Uint64(k), v)
				}
				if err := batch.write(ix); err != nil {
					return err
				}
				return ix.Put(indexState, tt.state)
			})
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, indexSeqsAfterReopen(t, path)); diff != "" {
				t.Errorf("index after reopening (-want +got):\n%s", diff)
			}
		})
	}
}

func indexSeqsAfterReopen(t *testing.T, path string) map[string][]uint64 {
	t.Helper()
	s := indexTestStore(t, path)
	defer s.Close()
	out := map[string][]uint64{}
	for _, sid := range []string{"ses_x", "ses_y"} {
		out[sid] = indexSeqs(t, s, sid, 0)
		if len(out[sid]) != 10 {
			t.Errorf("%s has %d records through the index, want 10", sid, len(out[sid]))
		}
	}
	return out
}
