package store

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
)

// TestJournalReplay: records acknowledged through the journal but not yet in
// bbolt (a crash between the two) are in bbolt after the next open; a torn
// tail, which was never acknowledged, is cut off.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.db")
	j, err := openJournal(path + ".journal")
	if err != nil {
		t.Fatal(err)
	}
	entries := []audit.Entry{
		{Seq: 1, Data: []byte(`{"seq":1}`)},
		{Seq: 2, Data: []byte(`{"seq":2}`), Side: &UsageUpdate{GrantID: "grt_1", Usage: grants.Usage{Uses: 7}}},
	}
	if err := j.append(entries, true); err != nil {
		t.Fatal(err)
	}
	if _, err := j.f.Write([]byte{0, 0, 0, 40, 1, 2, 3}); err != nil { // a torn write
		t.Fatal(err)
	}
	j.close()

	s, err := OpenBolt(path, DurabilityFsync, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	if err := s.db.View(func(tx *bolt.Tx) error { return get(tx, bucketUsage, "grt_1", &u) }); err != nil || u.Uses != 7 {
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
	s, err = OpenBolt(path, DurabilityFsync, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seq, _, err := s.AuditHead(context.Background()); err != nil || seq != 3 {
		t.Fatalf("head after reopen: %d %v", seq, err)
	}
}
