package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Redacted replaces every occurrence of a secret in a response.
const Redacted = "[REDACTED]"

// minEncodedNeedle is the fewest exactly determined characters an encoded
// form (base64, hex) must have to be redacted; shorter ones would match
// ordinary text.
const minEncodedNeedle = 8

// Scrubber replaces the forms a secret takes in what upstreams really write.
// For each value (the secret and what was sent derived from it):
//
//   - text: every character written raw, percent-encoded (%XX in upper or
//     lower hex, '+' for a space; a character other than a letter or digit
//     also percent-encoded twice, %25XX), JSON-escaped (\uXXXX in either case, \/
//     \" \\ \b \f \n \r \t) or as an HTML/XML character reference (&#D;
//     &#xH; &#XH; in either case, &amp; &lt; &gt; &quot; &apos;), in any mix, so
//     that every encoder's choice of safe characters is covered; a
//     character other than a letter or digit also as quoting encoders write
//     it (\xHH, \UXXXXXXXX, quoted-printable =HH, references with leading
//     zeros such as &#039;, a doubled quote as CSV, YAML and SQL write it,
//     and a single quote escaped as Python's repr or a shell writes it), a
//     non-ASCII one as \xHH or =HH per byte or \UXXXXXXXX;
//   - base64, standard and URL alphabets, at each of the three byte
//     alignments the value can have inside a longer encoded value (so an
//     echoed "Basic base64(user:secret)" is caught), with the partial
//     characters at both ends that carry the value's first and last bits,
//     padded or not; '+', '/' and '=' may themselves be escaped as above;
//   - hex of the value's bytes, either case;
//   - UTF-16 (little and big endian) of the value.
//
// Header names are matched without regard to ASCII case (Go canonicalizes
// their case).
type Scrubber struct {
	body  *matcher
	names *matcher // the same forms, ASCII-case-folded
}

// NewScrubber builds a scrubber for values (the secret and anything derived
// from it that was sent). Its patterns are compiled once here.
func NewScrubber(values ...string) *Scrubber {
	seen := map[string]bool{}
	var pats []pattern
	for _, v := range values {
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		pats = append(pats, textForm(v))
		pats = append(pats, base64Forms(v)...)
		if 2*len(v) >= minEncodedNeedle {
			pats = append(pats, hexForm(v))
		}
		pats = append(pats, utf16Forms(v)...)
	}
	folded := make([]pattern, len(pats))
	for i, p := range pats {
		folded[i] = p.fold()
	}
	return &Scrubber{body: compile(pats), names: compile(folded)}
}

// unit is one piece of a secret's form: the byte strings it may be written
// as, longest first.
type unit [][]byte

// pattern is a form: a sequence of units.
type pattern []unit

func newUnit(alts ...string) unit {
	set := map[string]bool{}
	for _, a := range alts {
		if a != "" {
			set[a] = true
		}
	}
	u := make(unit, 0, len(set))
	for a := range set {
		u = append(u, []byte(a))
	}
	sort.Slice(u, func(i, j int) bool {
		if len(u[i]) != len(u[j]) {
			return len(u[i]) > len(u[j])
		}
		return bytes.Compare(u[i], u[j]) < 0
	})
	return u
}

func (p pattern) maxLen() int {
	n := 0
	for _, u := range p {
		n += len(u[0])
	}
	return n
}

// fold is p with every alternative in ASCII lower case.
func (p pattern) fold() pattern {
	out := make(pattern, len(p))
	for i, u := range p {
		alts := make([]string, len(u))
		for j, a := range u {
			alts[j] = strings.ToLower(string(a))
		}
		out[i] = newUnit(alts...)
	}
	return out
}

const hexUpper, hexLower = "0123456789ABCDEF", "0123456789abcdef"

// charForms are the ways an ASCII byte c is written in text.
func charForms(c byte) []string {
	f := []string{
		string(c),
		"%" + string(hexUpper[c>>4]) + string(hexUpper[c&15]),
		"%" + string(hexLower[c>>4]) + string(hexLower[c&15]),
		`\u00` + string(hexUpper[c>>4]) + string(hexUpper[c&15]),
		`\u00` + string(hexLower[c>>4]) + string(hexLower[c&15]),
		"&#" + strconv.Itoa(int(c)) + ";",
		"&#x" + strconv.FormatInt(int64(c), 16) + ";",
		"&#x" + strings.ToUpper(strconv.FormatInt(int64(c), 16)) + ";",
		"&#X" + strconv.FormatInt(int64(c), 16) + ";",
		"&#X" + strings.ToUpper(strconv.FormatInt(int64(c), 16)) + ";",
	}
	if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		// Percent-encoded twice: a URL carried in another URL's query (a
		// redirect's "next=", an echoed request URL) holds the credential
		// the broker put in the query encoded once more.
		f = append(f, "%25"+string(hexUpper[c>>4])+string(hexUpper[c&15]), "%25"+string(hexLower[c>>4])+string(hexLower[c&15]))
		// What quoting encoders write for a character they escape: \xHH
		// (YAML double-quoted, Python, JavaScript, C), \UXXXXXXXX (TOML,
		// YAML, Python), =HH (quoted-printable, e-mail bodies), and character
		// references with leading zeros (PHP's htmlspecialchars writes &#039;).
		for _, d := range []string{hexUpper, hexLower} {
			hh := string(d[c>>4]) + string(d[c&15])
			f = append(f, `\x`+hh, `\U000000`+hh, "="+hh, "&#x00"+hh+";", "&#X00"+hh+";")
		}
		dec := strconv.Itoa(int(c))
		for len(dec) < 4 {
			dec = "0" + dec
			f = append(f, "&#"+dec+";")
		}
	}
	switch c {
	case '"':
		f = append(f, `\"`, "&quot;", `""`) // "" in CSV
	case '\\':
		f = append(f, `\\`)
	case '/':
		f = append(f, `\/`)
	case '\b':
		f = append(f, `\b`)
	case '\f':
		f = append(f, `\f`)
	case '\n':
		f = append(f, `\n`)
	case '\r':
		f = append(f, `\r`)
	case '\t':
		f = append(f, `\t`)
	case '&':
		f = append(f, "&amp;")
	case '<':
		f = append(f, "&lt;")
	case '>':
		f = append(f, "&gt;")
	case '\'':
		// '' in YAML single-quoted and SQL strings, \' in Python's repr and
		// JavaScript, '\'' and '"'"' in shell quoting.
		f = append(f, "&apos;", `''`, `\'`, `'\''`, `'"'"'`)
	case ' ':
		f = append(f, "+")
	}
	return f
}

// runeForms are the ways a non-ASCII character (raw: its UTF-8 bytes) is
// written in text: raw, each byte percent-encoded (each escape in either
// case), \uXXXX (a surrogate pair beyond the BMP) in either case, or an
// HTML/XML character reference.
func runeForms(r rune, raw string) []string {
	f := []string{raw,
		"&#" + strconv.Itoa(int(r)) + ";",
		"&#x" + strconv.FormatInt(int64(r), 16) + ";",
		"&#x" + strings.ToUpper(strconv.FormatInt(int64(r), 16)) + ";",
		"&#X" + strconv.FormatInt(int64(r), 16) + ";",
		"&#X" + strings.ToUpper(strconv.FormatInt(int64(r), 16)) + ";",
	}
	for mask := 0; mask < 1<<len(raw); mask++ {
		var b strings.Builder
		for i := 0; i < len(raw); i++ {
			digits := hexUpper
			if mask&(1<<i) != 0 {
				digits = hexLower
			}
			b.WriteString("%" + string(digits[raw[i]>>4]) + string(digits[raw[i]&15]))
		}
		f = append(f, b.String())
	}
	// \xHH per byte (Python's bytes repr, C), =HH per byte (quoted-printable),
	// \UXXXXXXXX (TOML, YAML, Python): each in upper or lower hex.
	for _, d := range []string{hexUpper, hexLower} {
		var x, qp strings.Builder
		for i := 0; i < len(raw); i++ {
			hh := string(d[raw[i]>>4]) + string(d[raw[i]&15])
			x.WriteString(`\x` + hh)
			qp.WriteString("=" + hh)
		}
		u := leftPad(strconv.FormatInt(int64(r), 16), 8)
		if d == hexUpper {
			u = strings.ToUpper(u)
		}
		f = append(f, x.String(), qp.String(), `\U`+u)
	}
	esc := func(v rune) string { return leftPad(strconv.FormatInt(int64(v), 16), 4) }
	if r > 0xFFFF {
		r1, r2 := utf16.EncodeRune(r)
		return append(f, `\u`+esc(r1)+`\u`+esc(r2), `\u`+strings.ToUpper(esc(r1))+`\u`+strings.ToUpper(esc(r2)))
	}
	return append(f, `\u`+esc(r), `\u`+strings.ToUpper(esc(r)))
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// textForm is v as text, each character in any of its escapes.
func textForm(v string) pattern {
	var p pattern
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		switch {
		case size == 1 && r == utf8.RuneError: // a byte that is not UTF-8
			c := v[i]
			p = append(p, newUnit(string(c), "%"+string(hexUpper[c>>4])+string(hexUpper[c&15]), "%"+string(hexLower[c>>4])+string(hexLower[c&15])))
		case size == 1:
			p = append(p, newUnit(charForms(byte(r))...))
		default:
			p = append(p, newUnit(runeForms(r, v[i:i+size])...))
		}
		i += size
	}
	return p
}

// encodedChar are the ways a character of an encoding (base64, hex) is
// written: letters and digits as themselves, the others escaped too.
func encodedChar(c byte) []string {
	if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return []string{string(c)}
	}
	return charForms(c)
}

// base64Forms are v's base64 encodings at each alignment, in both alphabets.
// A character that holds bits of v and of a neighbouring byte matches any
// character those neighbouring bits could make.
func base64Forms(v string) []pattern {
	var out []pattern
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			n := k + len(v)
			buf := make([]byte, n+1)
			copy(buf[k:], v)
			exactEnc := enc.EncodeToString(buf[:n])
			var p pattern
			exact := 0
			for j := 8 * k / 6; j <= (8*n-1)/6; j++ {
				lo, hi := 6*j, 6*j+6
				if lo >= 8*k && hi <= 8*n {
					p = append(p, newUnit(encodedChar(exactEnc[j])...))
					exact++
					continue
				}
				neighbour := n // the byte after v
				if lo < 8*k {
					neighbour = k - 1 // the byte before v
				}
				var alts []string
				seen := map[byte]bool{}
				for x := 0; x < 256; x++ {
					buf[neighbour] = byte(x)
					c := enc.EncodeToString(buf[:n+1])[j]
					if !seen[c] {
						seen[c] = true
						alts = append(alts, encodedChar(c)...)
					}
				}
				buf[neighbour] = 0
				p = append(p, newUnit(alts...))
			}
			if exact >= minEncodedNeedle {
				out = append(out, p)
			}
		}
	}
	return out
}

// hexForm is v's bytes in hex, each digit in either case.
func hexForm(v string) pattern {
	p := make(pattern, 0, 2*len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		p = append(p, newUnit(string(hexUpper[c>>4]), string(hexLower[c>>4])), newUnit(string(hexUpper[c&15]), string(hexLower[c&15])))
	}
	return p
}

// utf16Forms are v in UTF-16, little and big endian.
func utf16Forms(v string) []pattern {
	if !utf8.ValidString(v) {
		return nil
	}
	units := utf16.Encode([]rune(v))
	le, be := make([]byte, 0, 2*len(units)), make([]byte, 0, 2*len(units))
	for _, u := range units {
		le = append(le, byte(u), byte(u>>8))
		be = append(be, byte(u>>8), byte(u))
	}
	return []pattern{{newUnit(string(le))}, {newUnit(string(be))}}
}

// matcher finds the patterns in bytes. A match may start only where the
// first two bytes can begin one (a bitset over byte pairs), which keeps the
// scan of text without secrets to a table lookup per byte.
type matcher struct {
	pats   []pattern
	first  [256][]uint16 // patterns by a first byte they can start with
	pairs  [1024]uint64  // byte pairs (b0<<8 | b1) that can begin a match
	maxLen int           // the longest match any pattern can make
}

func compile(pats []pattern) *matcher {
	m := &matcher{pats: pats}
	setPair := func(b0, b1 byte) {
		k := uint(b0)<<8 | uint(b1)
		m.pairs[k>>6] |= 1 << (k & 63)
	}
	for i, p := range pats {
		m.maxLen = max(m.maxLen, p.maxLen())
		for _, a := range p[0] {
			if l := m.first[a[0]]; len(l) == 0 || l[len(l)-1] != uint16(i) {
				m.first[a[0]] = append(l, uint16(i))
			}
			switch {
			case len(a) >= 2:
				setPair(a[0], a[1])
			case len(p) == 1:
				for x := 0; x < 256; x++ {
					setPair(a[0], byte(x))
				}
			default:
				for _, a2 := range p[1] {
					setPair(a[0], a2[0])
				}
			}
		}
	}
	return m
}

// candidate reports whether a match could start at p.
func (m *matcher) candidate(b []byte, p int) bool {
	if p+1 < len(b) {
		k := uint(b[p])<<8 | uint(b[p+1])
		return m.pairs[k>>6]&(1<<(k&63)) != 0
	}
	return len(m.first[b[p]]) > 0
}

// at returns the end of the longest match starting at p, or -1.
func (m *matcher) at(b []byte, p int) int {
	best := -1
	for _, i := range m.first[b[p]] {
		if e := matchUnits(m.pats[i], b, p); e > best {
			best = e
		}
	}
	return best
}

// matchUnits returns the end of a match of us at p, or -1. Only when two
// alternatives of a unit both fit (one is a prefix of the other, as '%'
// and "%25") does it try each.
func matchUnits(us []unit, b []byte, p int) int {
	for len(us) > 0 {
		var fit []byte
		fits := 0
		for _, a := range us[0] {
			if p+len(a) <= len(b) && b[p] == a[0] && bytes.Equal(b[p:p+len(a)], a) {
				if fits == 0 {
					fit = a
				}
				fits++
			}
		}
		switch fits {
		case 0:
			return -1
		case 1:
			p += len(fit)
			us = us[1:]
			continue
		}
		for _, a := range us[0] {
			if p+len(a) <= len(b) && bytes.Equal(b[p:p+len(a)], a) {
				if e := matchUnits(us[1:], b, p+len(a)); e >= 0 {
					return e
				}
			}
		}
		return -1
	}
	return p
}

// firstMatch returns the position of the first match in b, or -1.
func (m *matcher) firstMatch(b []byte) int {
	for p := range b {
		if m.candidate(b, p) && m.at(b, p) >= 0 {
			return p
		}
	}
	return -1
}

// scan appends b[from:safe] to dst with every byte that lies inside a match
// replaced: a run of such bytes (overlapping matches merged) becomes one
// Redacted. Matches are looked for at the positions before safe; those
// may extend past it. end is where a redaction carried over from earlier
// input ends (bytes before it are inside it and not written). scan returns
// dst and how many bytes past safe the last redaction covers.
func (m *matcher) scan(dst, b []byte, from, safe, end int) ([]byte, int) {
	raw := max(from, end)
	for p := from; p < safe; p++ {
		if !m.candidate(b, p) {
			continue
		}
		e := m.at(b, p)
		if e < 0 {
			continue
		}
		if p >= end {
			dst = append(dst, b[raw:p]...)
			dst = append(dst, Redacted...)
		}
		end = max(end, e)
		raw = end
	}
	if raw < safe {
		dst = append(dst, b[raw:safe]...)
	}
	return dst, max(end-safe, 0)
}

// Bytes returns b with every secret form replaced (b itself when none occurs).
func (s *Scrubber) Bytes(b []byte) []byte {
	p := s.body.firstMatch(b)
	if p < 0 {
		return b
	}
	out := append(make([]byte, 0, len(b)+len(Redacted)), b[:p]...)
	out, _ = s.body.scan(out, b, p, len(b), 0)
	return out
}

// String is Bytes for strings.
func (s *Scrubber) String(v string) string {
	if s.body.firstMatch([]byte(v)) < 0 {
		return v // the conversion does not escape: no copy when nothing matches
	}
	return string(s.Bytes([]byte(v)))
}

// NameHasSecret reports whether a header name carries a secret in any form,
// in any ASCII case.
func (s *Scrubber) NameHasSecret(name string) bool {
	var buf [128]byte
	b := buf[:0]
	if len(name) > len(buf) {
		b = make([]byte, 0, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return s.names.firstMatch(b) >= 0
}

// Reader scrubs a stream without holding it whole: it keeps back only as
// many bytes as the longest form could straddle. It fails closed: when the
// source returns an error other than io.EOF, the bytes that came with it and
// those kept back (which may be the beginning of a secret) are dropped,
// never returned, and every later Read returns that error.
func (s *Scrubber) Reader(r io.Reader) io.Reader {
	if len(s.body.pats) == 0 {
		return r
	}
	return &scrubReader{m: s.body, src: r, chunk: make([]byte, 32<<10)}
}

type scrubReader struct {
	m       *matcher
	src     io.Reader
	chunk   []byte
	held    []byte // read, not yet scanned
	covered int    // bytes at the start of held inside a redaction already written
	buf     []byte // storage of out
	out     []byte // scrubbed, not yet returned
	err     error
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.src.Read(r.chunk)
		if err != nil && err != io.EOF {
			r.held, r.err = nil, err
			return 0, err
		}
		r.held = append(r.held, r.chunk[:n]...)
		safe := len(r.held) - (r.m.maxLen - 1)
		if err == io.EOF {
			safe, r.err = len(r.held), io.EOF
		}
		if safe <= 0 {
			continue
		}
		r.buf, r.covered = r.m.scan(r.buf[:0], r.held, 0, safe, r.covered)
		r.out = r.buf
		r.held = append(r.held[:0], r.held[safe:]...)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}
