package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
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
//     non-ASCII one as \xHH or =HH per byte or \UXXXXXXXX; with a
//     quoted-printable soft line break ("=\r\n" or "=\n") between any two
//     characters;
//   - base64, standard and URL alphabets, at each of the three byte
//     alignments the value can have inside a longer encoded value (so an
//     echoed "Basic base64(user:secret)" is caught), with the partial
//     characters at both ends that carry the value's first and last bits,
//     padded or not; '+', '/' and '=' may themselves be escaped as above;
//     with a line break ("\r\n" or "\n", as MIME wraps base64 at 76 or 64
//     columns) between any two characters;
//   - hex of the value's bytes, either case;
//   - UTF-16 (little and big endian) of the value.
//
// Header names are matched without regard to ASCII case (Go canonicalizes
// their case). A Scrubber of a Secrets set follows the set: each scrub
// uses the set as it is when it starts (a stream: at each piece).
type Scrubber struct {
	live  *Secrets
	fixed *automaton
}

// NewScrubber builds a scrubber for a fixed set of values (the secret and
// anything derived from it that was sent). Its patterns are compiled once here.
func NewScrubber(values ...string) *Scrubber {
	return &Scrubber{fixed: buildAutomaton(formsOf(values...))}
}

// auto is the automaton of the scrubber's set as it is now.
func (s *Scrubber) auto() *automaton {
	if s.live != nil {
		return s.live.cur.Load()
	}
	return s.fixed
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

// unitDef is one piece of a secret's form: the byte strings it may be
// written as (longest first) and the symbols all of them stand for (the
// ASCII-case-folded bytes of the character, or of the encoding's
// character); sym is nil for a unit whose alternatives stand for
// different characters (the partial characters at the ends of a base64
// form). Units of the same character are shared by every form.
type unitDef struct {
	alts   [][]byte
	sym    []byte
	maxAlt int
	lower  *unitDef // the same unit with every alternative in ASCII lower case (header names)
}

func makeUnit(sym []byte, alts ...string) *unitDef {
	u := sortedUnit(sym, alts)
	lower := make([]string, len(alts))
	for i, a := range alts {
		lower[i] = strings.ToLower(a)
	}
	u.lower = sortedUnit(sym, lower)
	u.lower.lower = u.lower
	return u
}

func sortedUnit(sym []byte, alts []string) *unitDef {
	set := map[string]bool{}
	for _, a := range alts {
		if a != "" {
			set[a] = true
		}
	}
	u := &unitDef{sym: sym, alts: make([][]byte, 0, len(set))}
	for a := range set {
		u.alts = append(u.alts, []byte(a))
		u.maxAlt = max(u.maxAlt, len(a))
	}
	sort.Slice(u.alts, func(i, j int) bool {
		if len(u.alts[i]) != len(u.alts[j]) {
			return len(u.alts[i]) > len(u.alts[j])
		}
		return bytes.Compare(u.alts[i], u.alts[j]) < 0
	})
	return u
}

// units interns the units every form shares (a character's escapes are
// the same in every secret), so a secret costs its sequence of pointers.
var units = struct {
	sync.Mutex
	m map[string]*unitDef
}{m: map[string]*unitDef{}}

func internUnit(key string, mk func() *unitDef) *unitDef {
	units.Lock()
	u := units.m[key]
	units.Unlock()
	if u != nil {
		return u
	}
	u = mk() // outside the lock: mk may intern the units it is made of
	units.Lock()
	defer units.Unlock()
	if v := units.m[key]; v != nil {
		return v
	}
	units.m[key] = u
	return u
}

// foldByte is b in ASCII lower case.
func foldByte(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

func foldBytes(s string) []byte {
	out := []byte(s)
	for i, c := range out {
		out[i] = foldByte(c)
	}
	return out
}

// Separators a form may carry between two of its units: MIME's line
// breaks inside base64, quoted-printable's soft line breaks inside text.
var (
	mimeBreaks = [][]byte{[]byte("\r\n"), []byte("\n")}
	softBreaks = [][]byte{[]byte("=\r\n"), []byte("=\n")}
)

// coreLen is how many symbols of a form the prefilter looks for.
const coreLen = 16

// form is one way a value is written: a sequence of units, with gaps
// (one separator at most) allowed between two of them.
type form struct {
	units  []*unitDef
	gaps   [][]byte
	maxLen int    // the longest match
	core   []byte // the symbols of the first exact units (at most coreLen)
	before int    // the most bytes a match has up to the end of its core
}

func newForm(us []*unitDef, gaps [][]byte) *form {
	f := &form{units: us, gaps: gaps}
	gap := 0
	for _, g := range gaps {
		gap = max(gap, len(g))
	}
	for i, u := range us {
		f.maxLen += u.maxAlt
		if i > 0 {
			f.maxLen += gap
		}
	}
	i := 0
	for i < len(us) && us[i].sym == nil {
		i++
	}
	for ; i < len(us) && us[i].sym != nil && len(f.core) < coreLen; i++ {
		f.core = append(f.core, us[i].sym...)
	}
	f.core = f.core[:min(len(f.core), coreLen)]
	for j := 0; j < i; j++ {
		f.before += us[j].maxAlt + gap
	}
	return f
}

// formsOf are the forms of values (see Scrubber).
func formsOf(values ...string) []*form {
	seen := map[string]bool{}
	var out []*form
	for _, v := range values {
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, newForm(textForm(v), softBreaks))
		for _, p := range base64Forms(v) {
			out = append(out, newForm(p, mimeBreaks))
		}
		if 2*len(v) >= minEncodedNeedle {
			out = append(out, newForm(hexForm(v), nil))
		}
		for _, p := range utf16Forms(v) {
			out = append(out, newForm(p, nil))
		}
	}
	return out
}

// textForm is v as text, each character in any of its escapes.
func textForm(v string) []*unitDef {
	var p []*unitDef
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		c := v[i]
		switch {
		case size == 1 && r == utf8.RuneError: // a byte that is not UTF-8
			p = append(p, internUnit("n"+string(c), func() *unitDef {
				return makeUnit([]byte{foldByte(c)}, string(c), "%"+string(hexUpper[c>>4])+string(hexUpper[c&15]), "%"+string(hexLower[c>>4])+string(hexLower[c&15]))
			}))
		case size == 1:
			p = append(p, internUnit("t"+string(c), func() *unitDef { return makeUnit([]byte{foldByte(c)}, charForms(c)...) }))
		default:
			raw := v[i : i+size]
			p = append(p, internUnit("r"+raw, func() *unitDef { return makeUnit(foldBytes(raw), runeForms(r, raw)...) }))
		}
		i += size
	}
	return p
}

// encodedChar is the unit of a character of an encoding (base64, hex):
// letters and digits as themselves, the others escaped too.
func encodedChar(c byte) *unitDef {
	return internUnit("e"+string(c), func() *unitDef {
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return makeUnit([]byte{foldByte(c)}, string(c))
		}
		return makeUnit([]byte{foldByte(c)}, charForms(c)...)
	})
}

// base64Forms are v's base64 encodings at each alignment, in both alphabets.
// A character that holds bits of v and of a neighbouring byte matches any
// character those neighbouring bits could make.
func base64Forms(v string) [][]*unitDef {
	var out [][]*unitDef
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			n := k + len(v)
			buf := make([]byte, n+1)
			copy(buf[k:], v)
			exactEnc := enc.EncodeToString(buf[:n])
			var p []*unitDef
			exact := 0
			for j := 8 * k / 6; j <= (8*n-1)/6; j++ {
				lo, hi := 6*j, 6*j+6
				if lo >= 8*k && hi <= 8*n {
					p = append(p, encodedChar(exactEnc[j]))
					exact++
					continue
				}
				neighbour := n // the byte after v
				if lo < 8*k {
					neighbour = k - 1 // the byte before v
				}
				var chars []byte
				seen := map[byte]bool{}
				for x := 0; x < 256; x++ {
					buf[neighbour] = byte(x)
					c := enc.EncodeToString(buf[:n+1])[j]
					if !seen[c] {
						seen[c] = true
						chars = append(chars, c)
					}
				}
				buf[neighbour] = 0
				sort.Slice(chars, func(a, b int) bool { return chars[a] < chars[b] })
				p = append(p, internUnit("b"+string(chars), func() *unitDef {
					var alts []string
					for _, c := range chars {
						for _, a := range encodedChar(c).alts {
							alts = append(alts, string(a))
						}
					}
					return makeUnit(nil, alts...)
				}))
			}
			if exact >= minEncodedNeedle {
				out = append(out, p)
			}
		}
	}
	return out
}

// hexForm is v's bytes in hex, each digit in either case.
func hexForm(v string) []*unitDef {
	digit := func(d byte) *unitDef {
		return internUnit("h"+string(hexLower[d]), func() *unitDef {
			return makeUnit([]byte{hexLower[d]}, string(hexUpper[d]), string(hexLower[d]))
		})
	}
	p := make([]*unitDef, 0, 2*len(v))
	for i := 0; i < len(v); i++ {
		p = append(p, digit(v[i]>>4), digit(v[i]&15))
	}
	return p
}

// utf16Forms are v in UTF-16, little and big endian.
func utf16Forms(v string) [][]*unitDef {
	if !utf8.ValidString(v) {
		return nil
	}
	units := utf16.Encode([]rune(v))
	le, be := make([]byte, 0, 2*len(units)), make([]byte, 0, 2*len(units))
	for _, u := range units {
		le = append(le, byte(u), byte(u>>8))
		be = append(be, byte(u>>8), byte(u))
	}
	return [][]*unitDef{{makeUnit(foldBytes(string(le)), string(le))}, {makeUnit(foldBytes(string(be)), string(be))}}
}

// matchForm returns the end of a match of f's units from i on at p, or -1;
// gap: a separator may come before units[i]. Only when two alternatives
// of a unit both fit (one is a prefix of the other, as '%' and "%25"), or
// a separator may or may not be taken, does it try each.
func matchForm(f *form, lower bool, i int, gap bool, b []byte, p int) int {
	for ; i < len(f.units); i++ {
		u := f.units[i]
		if lower {
			u = u.lower
		}
		if gap {
			for _, g := range f.gaps {
				if hasAt(b, p, g) {
					if e := matchForm(f, lower, i, false, b, p+len(g)); e >= 0 {
						return e
					}
				}
			}
		}
		gap = len(f.gaps) > 0
		var fit []byte
		fits := 0
		for _, a := range u.alts {
			if hasAt(b, p, a) {
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
			continue
		}
		for _, a := range u.alts {
			if hasAt(b, p, a) {
				if e := matchForm(f, lower, i+1, gap, b, p+len(a)); e >= 0 {
					return e
				}
			}
		}
		return -1
	}
	return p
}

func hasAt(b []byte, p int, a []byte) bool {
	return p+len(a) <= len(b) && b[p] == a[0] && bytes.Equal(b[p:p+len(a)], a)
}

// Bytes returns b with every secret form replaced (b itself when none occurs).
func (s *Scrubber) Bytes(b []byte) []byte {
	a := s.auto()
	spans := a.find(b, 0, len(b), false, nil)
	if len(spans) == 0 {
		return b
	}
	out, _ := redact(make([]byte, 0, len(b)+len(Redacted)), b, 0, len(b), 0, spans)
	return out
}

// String is Bytes for strings.
func (s *Scrubber) String(v string) string {
	a := s.auto()
	b := unsafeBytes(v)
	spans := a.find(b, 0, len(b), false, nil)
	if len(spans) == 0 {
		return v
	}
	out, _ := redact(make([]byte, 0, len(b)+len(Redacted)), b, 0, len(b), 0, spans)
	return string(out)
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
		b = append(b, foldByte(name[i]))
	}
	return len(s.auto().find(b, 0, len(b), true, nil)) > 0
}

// Reader scrubs a stream without holding it whole: it keeps back only as
// many bytes as the longest form could straddle. It fails closed: when the
// source returns an error other than io.EOF, the bytes that came with it and
// those kept back (which may be the beginning of a secret) are dropped,
// never returned, and every later Read returns that error.
func (s *Scrubber) Reader(r io.Reader) io.Reader {
	if s.live == nil && len(s.fixed.forms) == 0 {
		return r
	}
	return &scrubReader{s: s, src: r, chunk: make([]byte, 32<<10)}
}

type scrubReader struct {
	s       *Scrubber
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
		a := r.s.auto() // the set as it is now
		safe := len(r.held) - (a.maxLen - 1)
		if err == io.EOF {
			safe, r.err = len(r.held), io.EOF
		}
		if safe <= 0 {
			continue
		}
		r.buf, r.covered = a.scan(r.buf[:0], r.held, 0, safe, r.covered)
		r.out = r.buf
		r.held = append(r.held[:0], r.held[safe:]...)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// unsafeBytes is v's bytes without a copy, for reading only.
func unsafeBytes(v string) []byte { return unsafe.Slice(unsafe.StringData(v), len(v)) }
