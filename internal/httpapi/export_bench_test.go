package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/store"
)

// BenchmarkAuditExport streams 100k stored records in each format, the way
// GET /v1/audit does, and reports records per second.
func BenchmarkAuditExport(b *testing.B) {
	st := brokertest.MustOpenStore(b, store.DurabilityBuffered)
	w, _ := audit.NewWriter(context.Background(), st, time.Now, brokertest.Discard())
	const n = 100_000
	ev := audit.Event{Type: audit.TypeCallAllowed, Actor: audit.Actor{Kind: "sandbox", ID: "ses_01a2"}, SessionID: "ses_01a2",
		TaskID: "t-42", GrantID: "grt_01a2", Upstream: "github", Method: "GET", Path: "/repos/acme/widgets/issues", Decision: "allow", RequestID: "req_0123456789"}
	for i := 0; i < n-1; i++ {
		w.AppendAsync(ev)
	}
	// A waited-for record carries every queued one before it (Close alone
	// writes one batch of what is still queued).
	if _, err := w.Append(context.Background(), ev, nil); err != nil {
		b.Fatal(err)
	}
	w.Close()
	for _, format := range []string{"jsonl", "csv", "ocsf"} {
		b.Run(format, func(b *testing.B) {
			for b.Loop() {
				bw := bufio.NewWriterSize(io.Discard, 64<<10)
				enc := newAuditEncoder(format, bw)
				var e audit.Event
				count := 0
				err := st.ScanAudit(context.Background(), 0, func(_ uint64, data []byte) error {
					count++
					if format != "jsonl" {
						e = audit.Event{}
						if err := json.Unmarshal(data, &e); err != nil {
							return err
						}
					}
					return enc(data, &e)
				})
				if err != nil || count != n {
					b.Fatalf("%d records, %v", count, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
