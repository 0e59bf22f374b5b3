package store

import (
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/airlock-broker/airlock/internal/audit"
)

// BenchmarkApplyEntries is the applier's cost per record: journaled records
// moved into bbolt in batches of 1000 (about what 250 ms of load gives).
func BenchmarkApplyEntries(b *testing.B) {
	s, err := OpenBolt(filepath.Join(b.TempDir(), "a.db"), DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rec := bytes.Repeat([]byte("x"), 600)
	const batch = 1000
	entries := make([]audit.Entry, batch)
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		for i := range entries {
			seq++
			entries[i] = audit.Entry{Seq: seq, Data: rec}
		}
		if err := s.applyEntries(entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seq), "ns/record")
}
