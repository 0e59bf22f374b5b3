package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/url"
	"sort"
)

// Redacted replaces every occurrence of a secret in a response.
const Redacted = "[REDACTED]"

// minEncodedNeedle is the shortest encoded fragment worth redacting; shorter
// ones would match ordinary text.
const minEncodedNeedle = 8

// Scrubber replaces the forms a secret can take in an upstream's answer:
// raw, URL-encoded, and base64 (standard and URL alphabets) at each of the
// three byte alignments it can have inside a longer encoded value, so that
// an echoed "Basic base64(user:secret)" is caught too.
type Scrubber struct {
	needles [][]byte // longest first
	maxLen  int
}

// NewScrubber builds a scrubber for values (the secret and anything derived
// from it that was sent).
func NewScrubber(values ...string) *Scrubber {
	set := map[string]bool{}
	add := func(s string, min int) {
		if len(s) >= min {
			set[s] = true
		}
	}
	for _, v := range values {
		if v == "" {
			continue
		}
		add(v, 1)
		add(url.QueryEscape(v), 1)
		add(url.PathEscape(v), 1)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for k := 0; k < 3; k++ {
				add(alignedBase64(enc, v, k), minEncodedNeedle)
			}
		}
	}
	s := &Scrubber{}
	for n := range set {
		s.needles = append(s.needles, []byte(n))
		s.maxLen = max(s.maxLen, len(n))
	}
	sort.Slice(s.needles, func(i, j int) bool {
		if len(s.needles[i]) != len(s.needles[j]) {
			return len(s.needles[i]) > len(s.needles[j])
		}
		return bytes.Compare(s.needles[i], s.needles[j]) < 0
	})
	return s
}

// alignedBase64 is the part of the encoding of v that depends only on v's
// bytes when v starts at offset k (0..2) of a 3-byte group.
func alignedBase64(enc *base64.Encoding, v string, k int) string {
	buf := make([]byte, k+len(v))
	copy(buf[k:], v)
	e := enc.EncodeToString(buf)
	skip := (8*k + 5) / 6
	full := 8 * (k + len(v)) / 6
	if full <= skip {
		return ""
	}
	return e[skip:full]
}

// next finds the earliest needle in b (the longest at a tie).
func (s *Scrubber) next(b []byte) (pos, n int) {
	pos = -1
	for _, nd := range s.needles {
		limit := b
		if pos >= 0 {
			limit = b[:min(len(b), pos+len(nd))]
		}
		i := bytes.Index(limit, nd)
		if i >= 0 && (pos < 0 || i < pos) {
			pos, n = i, len(nd)
		}
	}
	return pos, n
}

// scrub appends b with needles replaced to dst, processing matches that
// start before safe; it returns dst and how many bytes of b were consumed.
func (s *Scrubber) scrub(dst, b []byte, safe int) ([]byte, int) {
	i := 0
	for i < safe {
		pos, n := s.next(b[i:])
		if pos < 0 || i+pos >= safe {
			dst = append(dst, b[i:safe]...)
			return dst, safe
		}
		dst = append(dst, b[i:i+pos]...)
		dst = append(dst, Redacted...)
		i += pos + n
	}
	return dst, i
}

// Bytes returns b with every secret form replaced (b itself when none occurs).
func (s *Scrubber) Bytes(b []byte) []byte {
	if len(s.needles) == 0 {
		return b
	}
	if pos, _ := s.next(b); pos < 0 {
		return b
	}
	out, _ := s.scrub(make([]byte, 0, len(b)), b, len(b))
	return out
}

// String is Bytes for strings.
func (s *Scrubber) String(v string) string {
	out := s.Bytes([]byte(v))
	return string(out)
}

// Reader scrubs a stream without holding it whole: it keeps back only as
// many bytes as the longest needle could straddle.
func (s *Scrubber) Reader(r io.Reader) io.Reader {
	if len(s.needles) == 0 {
		return r
	}
	return &scrubReader{s: s, src: r, chunk: make([]byte, 32<<10)}
}

type scrubReader struct {
	s     *Scrubber
	src   io.Reader
	chunk []byte
	held  []byte // read, not yet scrubbed
	out   []byte // scrubbed, not yet returned
	err   error
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			if len(r.held) > 0 {
				r.out, _ = r.s.scrub(r.out[:0], r.held, len(r.held))
				r.held = r.held[:0]
				continue
			}
			return 0, r.err
		}
		n, err := r.src.Read(r.chunk)
		r.held = append(r.held, r.chunk[:n]...)
		if err != nil {
			r.err = err
			continue
		}
		safe := len(r.held) - (r.s.maxLen - 1)
		if safe <= 0 {
			continue
		}
		var used int
		r.out, used = r.s.scrub(r.out[:0], r.held, safe)
		r.held = append(r.held[:0], r.held[used:]...)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}
