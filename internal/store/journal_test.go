package store

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	j, err := openJournal(path+".journal", 0)
	if err != nil {
		t.Fatal(err)
	}
	entries := []audit.Entry{
		{Seq: 1, Data: []byte(`{"seq":1}`)},
		{Seq: 2, Data: []byte(`{"seq":2}`), Side: &UsageUpdate{GrantID: "grt_1", Usage: grants.Usage{Uses: 7}}},
	}
	if err := j.append(entries); err != nil {
		t.Fatal(err)
	}
	if err := j.sync(); err != nil {
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
	s, err = OpenBolt(path, DurabilityFsync, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seq, _, err := s.AuditHead(context.Background()); err != nil || seq != 3 {
		t.Fatalf("head after reopen: %d %v", seq, err)
	}
}

// TestJournalSealsSegments: under steady load the current file is sealed at
// its limit, so the journal never grows without bound; sealed segments are
// replayed in order and deleted once applied.
func TestJournalSealsSegments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db.journal")
	j, err := openJournal(path, 300)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 40; seq++ {
		if err := j.append([]audit.Entry{{Seq: seq, Data: []byte(`{"record":"` + strings.Repeat("x", 20) + `"}`)}}); err != nil {
			t.Fatal(err)
		}
		if err := j.rotateIfFull(); err != nil {
			t.Fatal(err)
		}
	}
	segments, _ := filepath.Glob(path + ".*")
	if len(segments) < 3 {
		t.Fatalf("%d sealed segments after 40 records with a 300-byte limit", len(segments))
	}
	j.close()

	j, err = openJournal(path, 300)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	if err := j.replay(func(e audit.Entry) error { seqs = append(seqs, e.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("replay order: %v", seqs)
		}
	}
	if len(seqs) != 40 {
		t.Fatalf("replayed %d of 40 records", len(seqs))
	}
	// Applied through 20: the segments holding only records ≤ 20 go.
	if err := j.truncateIfApplied(20, 1<<62); err != nil {
		t.Fatal(err)
	}
	for _, sg := range j.sealed {
		if sg.lastSeq <= 20 {
			t.Fatalf("segment %s (last %d) kept after records up to 20 were applied", sg.path, sg.lastSeq)
		}
	}
	if err := j.truncateIfApplied(40, 0); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 || j.size != 0 {
		t.Fatalf("after applying everything: %v, size %d", left, j.size)
	}
	j.close()
}

// TestJournalPreallocates: entries overwrite zeros written out ahead (so a
// sync has no file size to commit), replay stops at the zeros, and appends
// after a reopen go on where the entries end.
func TestJournalPreallocates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db.journal")
	j, err := openJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := []byte(`{"record":"` + strings.Repeat("x", 500) + `"}`)
	for seq := uint64(1); seq <= 3000; seq++ { // ~1.5 MiB: a second chunk
		if err := j.append([]audit.Entry{{Seq: seq, Data: rec}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size()%allocChunk != 0 || st.Size() <= j.size {
		t.Fatalf("file is %d bytes for %d bytes of entries: not written out ahead in %d-byte chunks", st.Size(), j.size, allocChunk)
	}
	j.close() // a crash: the zeros stay

	j, err = openJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := j.replay(func(e audit.Entry) error { n++; return nil }); err != nil || n != 3000 {
		t.Fatalf("replayed %d of 3000 entries: %v", n, err)
	}
	if err := j.append([]audit.Entry{{Seq: 3001, Data: rec}}); err != nil {
		t.Fatal(err)
	}
	j.close()
	j, err = openJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	var last uint64
	n = 0
	if err := j.replay(func(e audit.Entry) error { n, last = n+1, e.Seq; return nil }); err != nil || n != 3001 || last != 3001 {
		t.Fatalf("after a reopen and one more append: %d entries, last %d, %v", n, last, err)
	}
}

// TestAuditBacklogFailsClosed: when records stop reaching bbolt, audit
// writes fail once maxPending wait, rather than memory growing without end.
func TestAuditBacklogFailsClosed(t *testing.T) {
	defer func(old uint64) { maxPending = old }(maxPending)
	maxPending = 50
	s, err := OpenBolt(filepath.Join(t.TempDir(), "a.db"), DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	s, err := OpenBolt(path, DurabilityBuffered, log)
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
	s, err = OpenBolt(path, DurabilityBuffered, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CommitAudit(context.Background(), []audit.Entry{{Seq: 121, Data: []byte(`{}`)}}); err != nil {
		t.Fatalf("first record after a restart: %v", err)
	}
}
