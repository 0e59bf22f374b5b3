package upstream

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"testing"
)

// referenceScrub is the brute-force scrub: every form tried at every
// position, as the matcher was before the automaton.
func referenceScrub(s *Scrubber, b []byte, fold bool) []span {
	var ms []span
	for _, a := range s.snap().parts {
		for p := range b {
			for _, f := range a.forms {
				if e := matchUnits(a.tab, f.units, breakSeps[f.brk], fold, b, p); e >= 0 {
					ms = append(ms, span{p, e})
				}
			}
		}
	}
	slices.SortStableFunc(ms, func(x, y span) int { return x.start - y.start })
	return ms
}

var fuzzSecrets = []string{canary, canaryUnicode, "ghp_0123456789abcdefghijKLMNOPQRSTUVWXYZ", "s3cr3t+/=="}

// fuzzInput builds an answer from recipe: each byte picks a secret form, a
// piece of one, a line break or noise.
func fuzzInput(recipe []byte) []byte {
	var out []byte
	for i := 0; i < len(recipe); i++ {
		op := recipe[i]
		v := fuzzSecrets[int(op>>4)%len(fuzzSecrets)]
		switch op & 15 {
		case 0:
			out = append(out, v...)
		case 1:
			out = append(out, url.QueryEscape(v)...)
		case 2:
			out = append(out, jsonString(v, true)...)
		case 3:
			out = append(out, base64.StdEncoding.EncodeToString([]byte(v))...)
		case 4:
			out = append(out, hex.EncodeToString([]byte(v))...)
		case 5:
			out = append(out, utf16Bytes(v, false)...)
		case 6:
			out = append(out, wrap(base64.URLEncoding.EncodeToString([]byte(string(op)+v)), 8+int(op)%70, "\r\n")...)
		case 7:
			out = append(out, v[:len(v)/2]...) // half a secret
		case 8:
			out = append(out, "=\r\n"...)
		case 9:
			out = append(out, '\n')
		case 10:
			out = append(out, xmlHex(v, op&16 != 0)...)
		default:
			if i+1 < len(recipe) {
				i++
				out = append(out, recipe[i])
			}
		}
	}
	return out
}

// The automaton finds exactly what trying every form at every position
// finds, in bodies and in header names, whole and streamed.
func FuzzScrub(f *testing.F) {
	for _, seed := range [][]byte{
		{0x00, 0x11, 0x22, 0x33},
		{0x03, 0x16, 0x29, 0x0b, '%', 0x37, 0x0c, 'a'},
		{0x06, 0x46, 0x08, 0x14, 0x0b, '\\', 0x0b, 'u', 0x2a},
		{0x0b, '&', 0x0b, '#', 0x1a, 0x3f, 0x15, 0x24, 0x09, 0x30},
	} {
		f.Add(seed)
	}
	s := NewScrubber(fuzzSecrets...)
	f.Fuzz(func(t *testing.T, recipe []byte) {
		recipe = recipe[:min(len(recipe), 128)] // the reference is slow on long inputs
		b := fuzzInput(recipe)
		want, _ := render(nil, b, referenceScrub(s, b, false), 0, len(b), 0)
		if got := s.Bytes(b); string(got) != string(want) {
			t.Fatalf("input %q:\n got %q\nwant %q", b, got, want)
		}
		st := s.Stream()
		var out []byte
		for i := 0; i < len(b); i += 1 + len(b)/5 {
			out = st.Append(out, b[i:min(len(b), i+1+len(b)/5)], false)
		}
		if out = st.Append(out, nil, true); string(out) != string(want) {
			t.Fatalf("input %q streamed:\n got %q\nwant %q", b, out, want)
		}
		lower := []byte(string(foldBytes(string(b))))
		if got, want := s.NameHasSecret(string(b)), len(referenceScrub(s, lower, true)) > 0; got != want {
			t.Fatalf("name %q: NameHasSecret = %v, want %v", b, got, want)
		}
	})
}
