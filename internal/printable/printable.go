// Package printable makes text from outside (a sandbox's request, an
// operator's label) safe to show on a terminal or in a file a person
// reads: no control characters, no bidirectional overrides, valid UTF-8.
package printable

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String is s with every control character (C0, DEL, C1), every
// bidirectional control and every other invisible format character written
// as \u+XXXX, and every byte that is not UTF-8 as \xNN; other text is kept.
// A string with none of them is returned as it is.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02X`, s[i])
		case unsafe(r):
			fmt.Fprintf(&b, `\u+%04X`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Clip is String(s) cut to at most n bytes on a character boundary, with
// "…" when it was cut.
func Clip(s string, n int) string {
	s = String(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// clean reports whether s needs no escaping (the common case, no allocation).
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			return cleanSlow(s[i:])
		}
	}
	return true
}

func cleanSlow(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

// unsafe reports whether r would change how a terminal or a text shows
// what follows it: controls, and format characters (bidi overrides and
// isolates, zero-width joiners and marks).
func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
