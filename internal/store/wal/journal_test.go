package wal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
)

// TestJournalCutsATornTail: entries written and synced replay whole, with
// their sides; a torn tail (a write never acknowledged) ends the replay and
// is cut off, so the next append follows the intact entries.
func TestJournalCutsATornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db.journal")
	codec := SideCodec{
		Encode: func(side *grants.UsageUpdate) ([]byte, error) { return []byte(side.GrantID), nil },
		Decode: func(data []byte) (*grants.UsageUpdate, error) { return &grants.UsageUpdate{GrantID: string(data)}, nil },
	}
	j, err := openJournal(path, 0, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.append([]audit.Entry{{Seq: 1, Data: []byte(`{"seq":1}`)}, {Seq: 2, Data: []byte(`{"seq":2}`), Side: &grants.UsageUpdate{GrantID: "side-2"}}}); err != nil {
		t.Fatal(err)
	}
	if err := j.sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.f.Write([]byte{0, 0, 0, 40, 1, 2, 3}); err != nil { // a torn write
		t.Fatal(err)
	}
	j.close()

	j, err = openJournal(path, 0, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []audit.Entry
	if err := j.replay(func(e audit.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Side != nil || got[1].Side == nil || got[1].Side.GrantID != "side-2" || string(got[1].Data) != `{"seq":2}` {
		t.Fatalf("replayed %+v", got)
	}
	if err := j.append([]audit.Entry{{Seq: 3, Data: []byte(`{"seq":3}`)}}); err != nil {
		t.Fatal(err)
	}
	j.close()
	j, err = openJournal(path, 0, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	var seqs []uint64
	if err := j.replay(func(e audit.Entry) error { seqs = append(seqs, e.Seq); return nil }); err != nil || len(seqs) != 3 || seqs[2] != 3 {
		t.Fatalf("after the cut and one more append: %v %v", seqs, err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < j.size {
		t.Fatalf("stat: %v %v", st, err)
	}
}

// TestJournalSealsSegments: under steady load the current file is sealed at
// its limit, so the journal never grows without bound; sealed segments are
// replayed in order and deleted once applied.
func TestJournalSealsSegments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db.journal")
	j, err := openJournal(path, 300, SideCodec{}, nil)
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

	j, err = openJournal(path, 300, SideCodec{}, nil)
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

// TestJournalPreallocates: zeros are written out ahead of the entries off
// the appenders' path (so a sync has no file size to commit), appends that
// outrun them neither overwrite them nor are overwritten, replay stops at
// the zeros, and appends after a reopen go on where the entries end.
func TestJournalPreallocates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.db.journal")
	j, err := openJournal(path, 0, SideCodec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := []byte(`{"record":"` + strings.Repeat("x", 500) + `"}`)
	for seq := uint64(1); seq <= 3000; seq++ { // ~1.5 MiB: a second chunk
		if err := j.append([]audit.Entry{{Seq: seq, Data: rec}}); err != nil {
			t.Fatal(err)
		}
	}
	j.mu.Lock()
	j.waitZeros()
	ahead, size := j.allocated-j.size, j.size
	j.mu.Unlock()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if ahead < allocAhead-allocChunk || st.Size() != size+ahead {
		t.Fatalf("file is %d bytes for %d bytes of entries, %d written out ahead: want at least %d ahead", st.Size(), size, ahead, allocAhead-allocChunk)
	}
	j.close() // a crash: the zeros stay

	j, err = openJournal(path, 0, SideCodec{}, nil)
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
	j, err = openJournal(path, 0, SideCodec{}, nil)
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
