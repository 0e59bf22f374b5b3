package boltstore

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/store"
)

// BenchmarkApplyEntries is the applier's cost per record: journaled records
// moved into bbolt in batches of 1000 (about what 250 ms of load gives).
func BenchmarkApplyEntries(b *testing.B) {
	s, err := OpenBolt(filepath.Join(b.TempDir(), "a.db"), store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
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

// BenchmarkApplyEntriesSessions is BenchmarkApplyEntries with records as the
// audit writer makes them, naming one of 64 sessions each (so the session
// index has an entry per record).
func BenchmarkApplyEntriesSessions(b *testing.B) {
	s, err := OpenBolt(filepath.Join(b.TempDir(), "a.db"), store.DurabilityBuffered, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	recs := make([][]byte, 64)
	for i := range recs {
		recs[i] = []byte(fmt.Sprintf(`{"seq":1,"time":"2026-01-01T00:00:00Z","type":"call.allowed","actor":{"kind":"sandbox","id":"ses_01a2%028x"},`+
			`"request_id":"req_0123456789abcdef01234567","session_id":"ses_01a2%028x","task_id":"t-42","grant_id":"grt_01a2","upstream":"github",`+
			`"method":"GET","path":"/repos/acme/widgets/issues","decision":"allow","prev_hash":"%064x","hash":"%064x"}`, i, i, i, i))
	}
	entries := make([]audit.Entry, batch)
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		for i := range entries {
			seq++
			entries[i] = audit.Entry{Seq: seq, Data: recs[seq%64]}
		}
		if err := s.applyEntries(entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seq), "ns/record")
}
