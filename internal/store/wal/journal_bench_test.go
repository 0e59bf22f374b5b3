package wal

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
)

// BenchmarkJournalAppend is one caller's turn on the journal: one record
// of the size of a call's "allowed" record appended (buffered mode: no
// sync in the turn), the journal's upkeep included. worst-turn-ns is the
// longest one turn took (a turn that wrote the journal's zeros out ahead).
func BenchmarkJournalAppend(b *testing.B) {
	j, err := openJournal(filepath.Join(b.TempDir(), "airlock.db.journal"), 32<<20, SideCodec{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.close()
	rec := []byte(`{"record":"` + strings.Repeat("x", 600) + `"}`)
	var seq uint64
	var worst time.Duration
	b.ReportAllocs()
	for b.Loop() {
		seq++
		t := time.Now()
		if err := j.append([]audit.Entry{{Seq: seq, Data: rec}}); err != nil {
			b.Fatal(err)
		}
		if err := j.rotateIfFull(); err != nil {
			b.Fatal(err)
		}
		worst = max(worst, time.Since(t))
	}
	b.ReportMetric(float64(worst.Nanoseconds()), "worst-turn-ns")
}

// BenchmarkJournalAppendSync is an fsync-mode caller alone: append, then sync.
func BenchmarkJournalAppendSync(b *testing.B) {
	j, err := openJournal(filepath.Join(b.TempDir(), "airlock.db.journal"), 32<<20, SideCodec{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.close()
	rec := []byte(`{"record":"` + strings.Repeat("x", 600) + `"}`)
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		seq++
		if err := j.append([]audit.Entry{{Seq: seq, Data: rec}}); err != nil {
			b.Fatal(err)
		}
		if err := j.sync(); err != nil {
			b.Fatal(err)
		}
	}
}
