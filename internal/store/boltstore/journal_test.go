package boltstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/wal"
)

// TestJournalReplay: records acknowledged through the journal but not yet in
// bbolt (a crash between the two) are in bbolt after the next open; a torn
// tail, which was never acknowledged, is cut off.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.db")
	// A journal whose records never reached bbolt (the applier failing,
	// then a crash), ending in a torn write.
	l, err := wal.Open(wal.Options{Path: path + ".journal", Apply: func([]audit.Entry) error { return errors.New("bbolt down") },
		Codec: wal.SideCodec{Encode: encodeSide, Decode: decodeSide}})
	if err != nil {
		t.Fatal(err)
	}
	entries := []audit.Entry{
		{Seq: 1, Data: []byte(`{"seq":1}`)},
		{Seq: 2, Data: []byte(`{"seq":2}`), Side: &grants.UsageUpdate{GrantID: "grt_1", Usage: grants.Usage{Uses: 7}}},
	}
	if _, err := l.Write(entries); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(false); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	end := int64(len(bytes.TrimRight(data, "\x00"))) // the preallocated zeros follow the entries
	f, err := os.OpenFile(path+".journal", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0, 0, 0, 40, 1, 2, 3}, end); err != nil { // a torn write
		t.Fatal(err)
	}
	f.Close()

	s, err := OpenBolt(path, store.DurabilityFsync, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	if err := s.ScanAudit(context.Background(), 0, func(seq uint64, _ []byte) error { seqs = append(seqs, seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 2 || seqs[1] != 2 {
		t.Fatalf("replayed records: %v", seqs)
	}
	var u grants.Usage
	if err := s.db.View(func(tx *bolt.Tx) (err error) { u, err = get(tx, bucketUsage, "grt_1", decodeUsage); return err }); err != nil || u.Uses != 7 {
		t.Fatalf("replayed usage: %+v %v", u, err)
	}
	// New records continue after the replayed ones, and survive a clean close.
	if err := s.CommitAudit(context.Background(), []audit.Entry{{Seq: 3, Data: []byte(`{"seq":3}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path + ".journal"); err != nil || st.Size() != 0 {
		t.Fatalf("the journal is not emptied on a clean close: %v %v", st, err)
	}
	s, err = OpenBolt(path, store.DurabilityFsync, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seq, _, err := s.AuditHead(context.Background()); err != nil || seq != 3 {
		t.Fatalf("head after reopen: %d %v", seq, err)
	}
}

// TestAuditBacklogFailsClosed: when records stop reaching bbolt, audit
// writes fail once maxPending wait, rather than memory growing without end.
func TestAuditBacklogFailsClosed(t *testing.T) {
	defer func(old uint64) { maxPending = old }(maxPending)
	maxPending = 50
	s, err := OpenBolt(filepath.Join(t.TempDir(), "a.db"), store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.db.Close() // bbolt fails from now on: nothing is applied
	var seq uint64
	for err == nil && seq < 100 {
		seq++
		err = s.CommitAudit(context.Background(), []audit.Entry{{Seq: seq, Data: []byte(`{}`)}})
		if seq%10 == 0 {
			_ = s.flushAudit() // the applier tries, and fails: its batch still waits
		}
	}
	if err == nil || seq > maxPending+1 {
		t.Fatalf("records written with bbolt failing: %d (last error %v); want a refusal at %d", seq, err, maxPending+1)
	}
}

// TestAuditBacklogCountsOnlyUnapplied: a healthy store never refuses, also
// after a restart with more records in its log than the limit.
func TestAuditBacklogCountsOnlyUnapplied(t *testing.T) {
	defer func(old uint64) { maxPending = old }(maxPending)
	maxPending = 50
	path := filepath.Join(t.TempDir(), "a.db")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := OpenBolt(path, store.DurabilityBuffered, log)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 120; seq++ {
		if err := s.CommitAudit(context.Background(), []audit.Entry{{Seq: seq, Data: []byte(`{}`)}}); err != nil {
			t.Fatalf("record %d: %v", seq, err)
		}
		if seq%10 == 0 {
			if err := s.flushAudit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(path, store.DurabilityBuffered, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CommitAudit(context.Background(), []audit.Entry{{Seq: 121, Data: []byte(`{}`)}}); err != nil {
		t.Fatalf("first record after a restart: %v", err)
	}
}
