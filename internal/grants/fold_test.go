package grants

import (
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestFoldRuneIsCaseClosure checks foldRune against a brute-force closure
// over every rune: two runes share a representative exactly when they are
// linked by unicode.SimpleFold, ToUpper, ToLower or ToTitle, directly or
// through other runes.
func TestFoldRuneIsCaseClosure(t *testing.T) {
	parent := make([]rune, unicode.MaxRune+1)
	for r := range parent {
		parent[r] = rune(r)
	}
	var find func(r rune) rune
	find = func(r rune) rune {
		for parent[r] != r {
			parent[r] = parent[parent[r]]
			r = parent[r]
		}
		return r
	}
	union := func(a, b rune) {
		ra, rb := find(a), find(b)
		if ra != rb {
			parent[rb] = ra
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		union(r, unicode.SimpleFold(r))
		union(r, unicode.ToUpper(r))
		union(r, unicode.ToLower(r))
		union(r, unicode.ToTitle(r))
	}
	rep := map[rune]rune{} // class root → foldRune of its first member
	for r := rune(0); r <= unicode.MaxRune; r++ {
		f := foldRune(r)
		if find(f) != find(r) {
			t.Fatalf("foldRune(%U) = %U, outside its case class", r, f)
		}
		root := find(r)
		if first, ok := rep[root]; ok && first != f {
			t.Fatalf("foldRune(%U) = %U, but another rune of its class folds to %U", r, f, first)
		}
		rep[root] = f
	}
}

func TestFoldKey(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"to", "TO", true},
		{"cost", "co\u017ft", true}, // ſ: Go's encoding/json
		{"kind", "\u212aind", true}, // Kelvin sign: Go's encoding/json
		{"id", "\u0131d", true},     // dotless i: .NET upper-casing
		{"id", "\u0130d", true},     // dotted capital I: Java lower-casing
		{"\u03c3", "\u03c2", true},  // σ, ς
		{"\u01c4", "\u01c5", true},  // DŽ, Dž (title case)
		{"\U00010400", "\U00010428", true},
		{"to", "to ", false},
		{"to", "tö", false},
		{"ss", "ß", false},
		{"", "", true},
		{"a", "", false},
	}
	for _, tt := range tests {
		if got := foldKey(tt.a) == foldKey(tt.b); got != tt.want {
			t.Errorf("foldKey(%q) == foldKey(%q): %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := foldEqual(tt.a, tt.b); got != tt.want {
			t.Errorf("foldEqual(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	for _, s := range []string{"amount", "to", "meta.label", "items.0.sku", "snake_case_key"} {
		if n := testing.AllocsPerRun(100, func() { _ = foldKey(s) }); n != 0 {
			t.Errorf("foldKey(%q) allocates %v times", s, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = foldEqual("amount", "AMOUNT") }); n != 0 {
		t.Errorf("foldEqual allocates %v times", n)
	}
}

func FuzzFoldKey(f *testing.F) {
	for _, s := range []string{"to", "TO", "co\u017ft", "\u212a", "\u0131", "\xff"} {
		f.Add(s, "to")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		if foldEqual(a, b) != (foldKey(a) == foldKey(b)) {
			t.Fatalf("foldEqual(%q, %q) disagrees with foldKey", a, b)
		}
		if foldKey(foldKey(a)) != foldKey(a) {
			t.Fatalf("foldKey(%q) is not idempotent", a)
		}
	})
}

func TestQueryKeyReaches(t *testing.T) {
	for _, c := range []struct {
		key, name string
		want      bool
	}{
		{"to", "to", true}, {"TO", "to", true}, {"to[]", "to", true}, {"to[0]", "to", true}, {"to[k]", "to", true},
		{"To[]", "to", true}, {" to", "to", true}, {"account.id", "account_id", true}, {"account id", "account_id", true},
		{"account[id", "account_id", true}, {"account_id[]", "account_id", true}, {"account_id", "account.id", true},
		{"filter[status]", "filter[status]", true}, {"FILTER[status]", "filter[status]", true}, {"filter[status][]", "filter[status]", true},
		{"filter[other]", "filter[status]", false}, {"filter", "filter[status]", false},
		{"toto", "to", false}, {"t", "to", false}, {"page[size]", "to", false}, {"[to]", "to", false}, {"account", "account_id", false},
	} {
		if got := QueryKeyReaches(c.key, c.name); got != c.want {
			t.Errorf("QueryKeyReaches(%q, %q) = %v, want %v", c.key, c.name, got, c.want)
		}
	}
}
