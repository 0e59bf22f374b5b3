package upstream

import (
	"strings"
	"testing"
)

func TestScrubStreamSplitSecret(t *testing.T) {
	const secret = "CANARY-stream-0123456789abcdef"
	s := NewScrubber(secret)
	msg := "before " + secret + " middle " + secret + " after"
	for cut := 0; cut <= len(msg); cut++ {
		for cut2 := cut; cut2 <= len(msg); cut2 += 7 {
			st := s.Stream()
			var out []byte
			out = st.Append(out, []byte(msg[:cut]), false)
			out = st.Append(out, []byte(msg[cut:cut2]), false)
			out = st.Append(out, []byte(msg[cut2:]), true)
			if strings.Contains(string(out), "CANARY") {
				t.Fatalf("cut %d,%d: secret passed: %q", cut, cut2, out)
			}
			if want := "before [REDACTED] middle [REDACTED] after"; string(out) != want {
				t.Fatalf("cut %d,%d: got %q, want %q", cut, cut2, out, want)
			}
		}
	}
	// The stream is ready for the next message after a final piece.
	st := s.Stream()
	_ = st.Append(nil, []byte("abc"), true)
	if got := string(st.Append(nil, []byte("xyz"), true)); got != "xyz" {
		t.Fatalf("next message: %q", got)
	}
}
