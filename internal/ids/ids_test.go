package ids

import (
	"strings"
	"testing"
	"time"
)

// Ids carry their kind, sort by creation time and differ when made at
// the same millisecond.
func TestNew(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a, b, c := New("ses_", t0), New("ses_", t0), New("ses_", t0.Add(time.Millisecond))
	if !strings.HasPrefix(a, "ses_") || len(a) != len("ses_")+28 || a == b {
		t.Fatalf("New: %q %q", a, b)
	}
	if !(a[:16] == b[:16] && a < c && b < c) {
		t.Fatalf("not time-ordered: %q %q %q", a, b, c)
	}
}
