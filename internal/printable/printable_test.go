package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"api", "api"},
		{"héllo wörld", "héllo wörld"},
		{"\x1b]0;owned\a\x1b[2J", `\u+001B]0;owned\u+0007\u+001B[2J`},
		{"a\r\nb\tc", `a\u+000D\u+000Ab\u+0009c`},
		{"evil\u202egnp.exe", `evil\u+202Egnp.exe`},
		{"\xff\xfe", `\xFF\xFE`},
		{"\u0085", `\u+0085`},
	} {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 40) // 80 bytes
	got := Clip(s, 65)
	if !utf8.ValidString(got) || len(got) > 65+len("…") || !strings.HasSuffix(got, "…") {
		t.Fatalf("Clip: %q", got)
	}
	if got := Clip("\xff/x", 64); got != `\xFF/x` {
		t.Fatalf("Clip of invalid UTF-8: %q", got)
	}
	if got := Clip("short", 64); got != "short" {
		t.Fatalf("Clip: %q", got)
	}
}
