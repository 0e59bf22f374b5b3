package grants

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// JSON object keys are compared by their fold key. Many decoders match keys
// to fields case-insensitively, each in its own way: Go's encoding/json by
// Unicode simple case folding ("ſ" U+017F is "s", "K" U+212A is "k"), .NET's
// OrdinalIgnoreCase by upper-casing ("ı" U+0131 is "I"), Java by toUpperCase
// and toLowerCase. A body holding "to" and "TO" could be checked under one
// and read under the other, so two keys are the same field when their fold
// keys are equal: every rune is replaced by the representative of its case
// class, the smallest set closed under unicode.SimpleFold orbits and
// unicode.ToUpper, ToLower and ToTitle (so "I", "i", "ı" and "İ" are one
// class, and "S", "s", "ſ"). The representative is the ASCII lower-case
// letter when the class has one, else the class's smallest rune; a key in
// ASCII lower case is thus its own fold key and folding it allocates nothing.
//
// Full case mappings that change length (German "ß" upper-cases to "SS" in
// Java's String.toUpperCase) and Unicode normalization are not folded.

// foldTable maps each non-ASCII rune whose representative differs from
// itself to that representative. It is built once, on first use, from
// unicode.CaseRanges (every rune with a case mapping or a non-trivial fold
// orbit lies in one; TestFoldRuneIsCaseClosure checks all runes).
var foldTable = sync.OnceValue(func() map[rune]rune {
	parent := map[rune]rune{}
	var find func(r rune) rune
	find = func(r rune) rune {
		p, ok := parent[r]
		if !ok || p == r {
			return r
		}
		root := find(p)
		parent[r] = root
		return root
	}
	union := func(a, b rune) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		if rb < ra {
			ra, rb = rb, ra
		}
		parent[rb] = ra // the root is the class's smallest rune
		parent[ra] = ra
	}
	for _, cr := range unicode.CaseRanges {
		for r := rune(cr.Lo); r <= rune(cr.Hi); r++ {
			union(r, unicode.ToUpper(r))
			union(r, unicode.ToLower(r))
			union(r, unicode.ToTitle(r))
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				union(r, f)
			}
		}
	}
	// An ASCII upper-case letter is the smallest rune of its class: its
	// representative is its lower-case letter instead.
	rep := map[rune]rune{}
	for r := range parent {
		root := find(r)
		if root >= 'A' && root <= 'Z' {
			root += 'a' - 'A'
		}
		if r >= utf8.RuneSelf && root != r {
			rep[r] = root
		}
	}
	return rep
})

// foldRune is the representative of r's case class.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	if f, ok := foldTable()[r]; ok {
		return f
	}
	return r
}

// foldKey is the fold key of a JSON object key: s itself (no allocation)
// when s is already folded.
func foldKey(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				break
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if foldRune(r) != r || r == utf8.RuneError && n == 1 {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, i, len(s)+4)
	copy(b, s[:i])
	for _, r := range s[i:] {
		b = utf8.AppendRune(b, foldRune(r))
	}
	return string(b)
}

// foldEqual reports whether a and b have the same fold key, without
// allocating.
func foldEqual(a, b string) bool {
	for a != "" && b != "" {
		var ra, rb rune
		if c := a[0]; c < utf8.RuneSelf {
			ra, a = rune(c), a[1:]
		} else {
			r, n := utf8.DecodeRuneInString(a)
			ra, a = r, a[n:]
		}
		if c := b[0]; c < utf8.RuneSelf {
			rb, b = rune(c), b[1:]
		} else {
			r, n := utf8.DecodeRuneInString(b)
			rb, b = r, b[n:]
		}
		if ra != rb && foldRune(ra) != foldRune(rb) {
			return false
		}
	}
	return a == b
}

// QueryKeyReaches reports whether a server could read the query key key as
// the parameter name: their fold keys are equal, or they are once each is
// read as PHP, Rails and Express (qs) read key names. Those read "to[]",
// "to[0]" and "to[k]" as "to" (an array or a map); PHP also drops leading
// spaces and reads ' ', '.' and a '[' with no ']' after it as '_', so
// "account.id", "account id" and "account[id" are "account_id". A name that
// itself holds '[' is reached by its fold variants and by itself followed by
// '['.
func QueryKeyReaches(key, name string) bool {
	if foldEqual(key, name) {
		return true
	}
	if strings.IndexByte(name, '[') >= 0 {
		return len(key) > len(name) && key[len(name)] == '[' && foldEqual(key[:len(name)], name)
	}
	if !readAsOther(key) && !readAsOther(name) {
		return false // neither changes when read so: foldEqual decided
	}
	return foldEqual(queryRoot(key), queryRoot(name))
}

// readAsOther reports whether queryRoot could change s.
func readAsOther(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '.', '[':
			return true
		}
	}
	return false
}

// queryRoot is the name PHP, Rails and qs read a query key as (see
// QueryKeyReaches).
func queryRoot(key string) string {
	key = strings.TrimLeft(key, " ")
	if i := strings.IndexByte(key, '['); i > 0 && strings.IndexByte(key[i:], ']') > 0 {
		key = key[:i]
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '[' {
			return '_'
		}
		return r
	}, key)
}
