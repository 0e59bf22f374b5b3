package main

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// aixSeqs are the sequence numbers of records, in the order given.
func aixSeqs(recs []brokertest.AuditRecord) []uint64 {
	out := []uint64{}
	for _, r := range recs {
		out = append(out, r.Seq)
	}
	return out
}

// aixExport is GET /v1/audit with a query, as the admin.
func aixExport(t *testing.T, b *brokertest.Proc, query url.Values) []brokertest.AuditRecord {
	t.Helper()
	r := b.Do("GET", b.Control+"/v1/audit?"+query.Encode(), brokertest.ProcAdminToken, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("export %s: %d %s", query.Encode(), r.Status, r.Body)
	}
	return brokertest.ParseAudit(t, r.Body)
}

// aixWhere filters the full log the way the export's filter reads.
func aixWhere(all []brokertest.AuditRecord, keep func(brokertest.AuditRecord) bool) []brokertest.AuditRecord {
	var out []brokertest.AuditRecord
	for _, r := range all {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

var aixTrailRow = regexp.MustCompile(`<tr><td>(\d+)</td>`)

// TestAuditBySessionThroughTheIndex: a session's export
// (GET /v1/audit?session_id=) and its trail on the reviewers' page, both read
// through the store's index by session, hold exactly the records of the full
// log that name the session, alone or with the other filters, and still do
// after a restart.
func TestAuditBySessionThroughTheIndex(t *testing.T) {
	up := brokertest.NewUpstream(t)
	dataDir := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: dataDir})
	rule := map[string]any{"method": "GET", "path": "/ok"}
	sa := b.Session(brokertest.TrustedSession(brokertest.APIGrant(rule)))
	sb := b.Session(brokertest.TrustedSession(brokertest.APIGrant(rule)))
	// Interleaved calls: allowed, and denied (a path no rule allows).
	for i := 0; i < 3; i++ {
		for _, s := range []brokertest.Created{sa, sb} {
			if r := b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil); r.Status != http.StatusOK {
				t.Fatalf("call: %d %s", r.Status, r.Body)
			}
		}
		b.Do("GET", b.Sandbox+"/v1/proxy/api/nope", sa.Token, nil).WantProblem(t, http.StatusForbidden, "no_matching_grant")
	}
	// The completion records are written after the answers.
	var all []brokertest.AuditRecord
	brokertest.Eventually(t, 10*time.Second, func() bool {
		all = brokertest.ParseAudit(t, b.AuditExport())
		return len(aixWhere(all, func(r brokertest.AuditRecord) bool { return r.Type == "call.completed" })) == 6
	})

	check := func(t *testing.T, b *brokertest.Proc, all []brokertest.AuditRecord) {
		t.Helper()
		for _, s := range []brokertest.Created{sa, sb} {
			mine := aixWhere(all, func(r brokertest.AuditRecord) bool { return r.SessionID == s.ID })
			if len(mine) < 7 {
				t.Fatalf("session %s has %d records in the full log", s.ID, len(mine))
			}
			tests := []struct {
				name  string
				query url.Values
				want  []brokertest.AuditRecord
			}{
				{"session", url.Values{"session_id": {s.ID}}, mine},
				{"session from a seq", url.Values{"session_id": {s.ID}, "from_seq": {strconv.FormatUint(mine[3].Seq, 10)}}, mine[3:]},
				{"session and type", url.Values{"session_id": {s.ID}, "type": {"call.completed"}},
					aixWhere(mine, func(r brokertest.AuditRecord) bool { return r.Type == "call.completed" })},
				{"session as csv", url.Values{"session_id": {s.ID}, "format": {"csv"}}, nil},
			}
			for _, tt := range tests {
				if tt.query.Get("format") == "csv" {
					r := b.Do("GET", b.Control+"/v1/audit?"+tt.query.Encode(), brokertest.ProcAdminToken, nil)
					if rows := len(regexp.MustCompile(`(?m)^\d+,`).FindAll(r.Body, -1)); r.Status != 200 || rows != len(mine) {
						t.Errorf("%s: %d, %d rows, want %d", tt.name, r.Status, rows, len(mine))
					}
					continue
				}
				if diff := cmp.Diff(aixSeqs(tt.want), aixSeqs(aixExport(t, b, tt.query))); diff != "" {
					t.Errorf("%s %s (-want +got):\n%s", tt.name, s.ID, diff)
				}
			}

			// The trail: the session's records, newest first.
			br := attackUILogin(t, b, b.NewToken("reviewer", "rhea-"+s.ID))
			resp, page := br.get("/ui/sessions/" + s.ID)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("session page: %d", resp.StatusCode)
			}
			var trail []uint64
			for _, m := range aixTrailRow.FindAllStringSubmatch(page, -1) {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				trail = append(trail, n)
			}
			want := aixSeqs(mine)
			slices.Reverse(want)
			if diff := cmp.Diff(want, trail); diff != "" {
				t.Errorf("trail of %s (-want +got):\n%s", s.ID, diff)
			}
		}
		if got := aixExport(t, b, url.Values{"session_id": {"ses_nobody"}}); len(got) != 0 {
			t.Errorf("an unknown session exports %d records", len(got))
		}
	}
	t.Run("running", func(t *testing.T) { check(t, b, all) })

	b.Stop()
	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: dataDir})
	all = brokertest.ParseAudit(t, b.AuditExport())
	t.Run("after a restart", func(t *testing.T) { check(t, b, all) })
}
