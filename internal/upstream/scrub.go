package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//   - UTF-16 (little and big endian) of the value;
//   - as MIME writes long values: base64 with a line break ("\r\n" or "\n")
//     between any two of its characters (lines of 76 or 64), and
//     quoted-printable text with a soft line break ("=\r\n" or "=\n")
//     between any two encoded characters.
//
// Header names are matched without regard to ASCII case (Go canonicalizes
// their case).
//
// A scrubber made by NewScrubber holds a fixed set; the one a Secrets
// returns follows the set as it changes. Either costs the same per byte
// however many values it holds: one automaton over all their forms finds
// where a form may end, and only there is the form itself checked.
type Scrubber struct {
	fixed *snapshot
	live  *atomic.Pointer[snapshot] // the current set of a Secrets, when not fixed
}

// NewScrubber builds a scrubber for values (the secret and anything derived
// from it that was sent). Its patterns are compiled once here.
func NewScrubber(values ...string) *Scrubber {
	t := newUnitTable()
	seen := map[string]bool{}
	var fs []form
	for _, v := range values {
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		fs = append(fs, t.forms(v)...)
	}
	return &Scrubber{fixed: newSnapshot(t, fs)}
}

func (s *Scrubber) snap() *snapshot {
	if s.live != nil {
		return s.live.Load()
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
		var x strings.Builder
		qp := []string{""}
		for i := 0; i < len(raw); i++ {
			hh := string(d[raw[i]>>4]) + string(d[raw[i]&15])
			x.WriteString(`\x` + hh)
			// A quoted-printable soft line break may fall between the
			// escapes of one character's bytes.
			var next []string
			for _, q := range qp {
				next = append(next, q+"="+hh)
				if i+1 < len(raw) {
					next = append(next, q+"="+hh+"=\r\n", q+"="+hh+"=\n")
				}
			}
			qp = next
		}
		u := leftPad(strconv.FormatInt(int64(r), 16), 8)
		if d == hexUpper {
			u = strings.ToUpper(u)
		}
		f = append(f, x.String(), `\U`+u)
		f = append(f, qp...)
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

// unit is one piece of a secret's form: the byte strings it may be written
// as, longest first.
type unit [][]byte

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

// unitEntry is a unit with what the automaton needs: the symbols every
// alternative decodes to (ASCII letters folded to lower case; nil for an
// inexact unit, such as a base64 character that also carries a neighbour's
// bits) and which bytes an alternative can begin with.
type unitEntry struct {
	alts  unit
	mean  []byte
	max   int       // the longest alternative
	first [4]uint64 // first bytes of the alternatives
	lower [4]uint64 // the same, lower-cased
}

func bitSet(s *[4]uint64, c byte)      { s[c>>6] |= 1 << (c & 63) }
func bitHas(s *[4]uint64, c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func foldBytes(s string) []byte {
	b := []byte(s)
	for i, c := range b {
		b[i] = lowerByte(c)
	}
	return b
}

// unitTable interns units: the forms of many secrets share most of them
// (a character's escapes, a hex digit), so a form is a list of ids. Entries
// are only appended; a view taken under mu stays valid without it.
type unitTable struct {
	mu    sync.Mutex
	ids   map[string]uint32
	tab   []unitEntry
	exact int // entries with a meaning, which give the token trie its tokens
	text  [256]uint32
	enc   [256]uint32
	raw   [256]uint32
	one   [256]uint32
	nib   [16]uint32
	trie  *tokenTrie // tokens of the first trieFor exact entries
	trieN int
}

func newUnitTable() *unitTable { return &unitTable{ids: map[string]uint32{}} }

// intern returns the id of the unit of alts meaning mean. t.mu is held.
func (t *unitTable) intern(alts []string, mean []byte) uint32 {
	u := newUnit(alts...)
	var key strings.Builder
	if mean == nil {
		key.WriteString("~")
	} else {
		key.WriteString("=" + string(mean))
	}
	for _, a := range u {
		key.WriteString("\x00" + string(a))
	}
	if id, ok := t.ids[key.String()]; ok {
		return id
	}
	e := unitEntry{alts: u, mean: mean, max: len(u[0])}
	for _, a := range u {
		bitSet(&e.first, a[0])
		bitSet(&e.lower, lowerByte(a[0]))
	}
	id := uint32(len(t.tab))
	t.tab = append(t.tab, e)
	t.ids[key.String()] = id
	if mean != nil {
		t.exact++
	}
	return id
}

// cached interns through a per-byte cache (ids are stored plus one).
func (t *unitTable) cached(slot *uint32, alts func() []string, mean []byte) uint32 {
	if *slot == 0 {
		*slot = t.intern(alts(), mean) + 1
	}
	return *slot - 1
}

// view is the table as it is now and its token trie.
func (t *unitTable) view() ([]unitEntry, *tokenTrie) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.trie == nil || t.trieN != t.exact {
		t.trie, t.trieN = buildTokenTrie(t.tab), t.exact
	}
	return t.tab[:len(t.tab):len(t.tab)], t.trie
}

// breaks says which line breaks may stand between two units of a form.
type breaks uint8

const (
	noBreaks   breaks = iota
	lineBreaks        // base64 as MIME and PEM wrap it
	softBreaks        // quoted-printable soft line breaks
)

var breakSeps = [...][]string{noBreaks: nil, lineBreaks: {"\r\n", "\n"}, softBreaks: {"=\r\n", "=\n"}}

func (k breaks) maxLen() int {
	n := 0
	for _, s := range breakSeps[k] {
		n = max(n, len(s))
	}
	return n
}

// coreUnits is how many exact units of a form the automaton looks for.
const coreUnits = 12

// form is one pattern: a sequence of units (ids in a unitTable). Its core,
// units [core0, core1), is the run of exact units the automaton finds; a
// match ending a core at e starts at most win bytes before e.
type form struct {
	units        []uint32
	brk          breaks
	core0, core1 int32
	win          int32
	maxLen       int32 // the longest match
}

// forms are the patterns of value v.
func (t *unitTable) forms(v string) []form {
	t.mu.Lock()
	defer t.mu.Unlock()
	fs := []form{t.textForm(v)}
	fs = append(fs, t.base64Forms(v)...)
	if 2*len(v) >= minEncodedNeedle {
		fs = append(fs, t.hexForm(v))
	}
	fs = append(fs, t.utf16Forms(v)...)
	for i := range fs {
		t.finish(&fs[i])
	}
	return fs
}

func (t *unitTable) finish(f *form) {
	c0 := 0
	for c0 < len(f.units) && t.tab[f.units[c0]].mean == nil {
		c0++
	}
	c1 := c0
	for c1 < len(f.units) && c1-c0 < coreUnits && t.tab[f.units[c1]].mean != nil {
		c1++
	}
	sep := f.brk.maxLen()
	win, total := 0, 0
	for i, id := range f.units {
		total += t.tab[id].max
		if i < c1 {
			win += t.tab[id].max + sep
		}
	}
	total += (len(f.units) - 1) * sep
	f.core0, f.core1, f.win, f.maxLen = int32(c0), int32(c1), int32(win), int32(total)
}

// textForm is v as text, each character in any of its escapes.
func (t *unitTable) textForm(v string) form {
	f := form{brk: softBreaks}
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		c := v[i]
		var id uint32
		switch {
		case size == 1 && r == utf8.RuneError: // a byte that is not UTF-8
			id = t.cached(&t.raw[c], func() []string {
				return []string{string([]byte{c}), "%" + string(hexUpper[c>>4]) + string(hexUpper[c&15]), "%" + string(hexLower[c>>4]) + string(hexLower[c&15])}
			}, []byte{c})
		case size == 1:
			id = t.cached(&t.text[c], func() []string { return charForms(c) }, []byte{lowerByte(c)})
		default:
			id = t.intern(runeForms(r, v[i:i+size]), foldBytes(v[i:i+size]))
		}
		f.units = append(f.units, id)
		i += size
	}
	return f
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
func (t *unitTable) base64Forms(v string) []form {
	var out []form
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			n := k + len(v)
			buf := make([]byte, n+1)
			copy(buf[k:], v)
			exactEnc := enc.EncodeToString(buf[:n])
			f := form{brk: lineBreaks}
			exact := 0
			for j := 8 * k / 6; j <= (8*n-1)/6; j++ {
				lo, hi := 6*j, 6*j+6
				if lo >= 8*k && hi <= 8*n {
					c := exactEnc[j]
					f.units = append(f.units, t.cached(&t.enc[c], func() []string { return encodedChar(c) }, []byte{lowerByte(c)}))
					exact++
					continue
				}
				neighbour := n // the byte after v
				if lo < 8*k {
					neighbour = k - 1 // the byte before v
				}
				var alts []string
				seen := map[byte]bool{}
				g := buf[3*(j/4) : min(3*(j/4)+3, n+1)] // the group of 3 bytes char j encodes
				var out [4]byte
				for x := 0; x < 256; x++ {
					buf[neighbour] = byte(x)
					enc.Encode(out[:], g)
					c := out[j%4]
					if !seen[c] {
						seen[c] = true
						alts = append(alts, encodedChar(c)...)
					}
				}
				buf[neighbour] = 0
				f.units = append(f.units, t.intern(alts, nil))
			}
			if exact >= minEncodedNeedle {
				out = append(out, f)
			}
		}
	}
	return out
}

// hexForm is v's bytes in hex, each digit in either case.
func (t *unitTable) hexForm(v string) form {
	f := form{units: make([]uint32, 0, 2*len(v))}
	digit := func(d byte) uint32 {
		return t.cached(&t.nib[d], func() []string { return []string{string(hexUpper[d]), string(hexLower[d])} }, []byte{hexLower[d]})
	}
	for i := 0; i < len(v); i++ {
		f.units = append(f.units, digit(v[i]>>4), digit(v[i]&15))
	}
	return f
}

// utf16Forms are v in UTF-16, little and big endian (a unit per byte).
func (t *unitTable) utf16Forms(v string) []form {
	if !utf8.ValidString(v) {
		return nil
	}
	units := utf16.Encode([]rune(v))
	var le, be form
	b := func(c byte) uint32 {
		return t.cached(&t.one[c], func() []string { return []string{string([]byte{c})} }, []byte{lowerByte(c)})
	}
	for _, u := range units {
		le.units = append(le.units, b(byte(u)), b(byte(u>>8)))
		be.units = append(be.units, b(byte(u>>8)), b(byte(u)))
	}
	return []form{le, be}
}

// matchUnits returns the end of a match of the units us at p, or -1. A
// break of seps may stand between two units. With fold, b is lower case
// and matched against the alternatives lower-cased. Only when more than one
// way fits (an alternative that is a prefix of another, as '%' and "%25",
// or a line break that may be one) does it try each.
func matchUnits(tab []unitEntry, us []uint32, seps []string, fold bool, b []byte, p int) int {
	for len(us) > 0 {
		if p >= len(b) {
			return -1
		}
		u := &tab[us[0]]
		if fold && !bitHas(&u.lower, b[p]) || !fold && !bitHas(&u.first, b[p]) {
			return -1
		}
		var fit []byte
		fits := 0
		for _, a := range u.alts {
			if altAt(a, b, p, fold) {
				if fits == 0 {
					fit = a
				}
				fits++
			}
		}
		if fits == 0 {
			return -1
		}
		if fits == 1 && !(len(us) > 1 && breakAt(seps, b, p+len(fit))) {
			p += len(fit)
			us = us[1:]
			continue
		}
		for _, a := range u.alts {
			if !altAt(a, b, p, fold) {
				continue
			}
			q := p + len(a)
			if e := matchUnits(tab, us[1:], seps, fold, b, q); e >= 0 {
				return e
			}
			if len(us) == 1 {
				continue
			}
			for _, s := range seps {
				if q+len(s) <= len(b) && string(b[q:q+len(s)]) == s {
					if e := matchUnits(tab, us[1:], seps, fold, b, q+len(s)); e >= 0 {
						return e
					}
				}
			}
		}
		return -1
	}
	return p
}

func altAt(a, b []byte, p int, fold bool) bool {
	if p+len(a) > len(b) {
		return false
	}
	if !fold {
		return bytes.Equal(b[p:p+len(a)], a)
	}
	for i, c := range a {
		if lowerByte(c) != b[p+i] {
			return false
		}
	}
	return true
}

func breakAt(seps []string, b []byte, p int) bool {
	for _, s := range seps {
		if p+len(s) <= len(b) && string(b[p:p+len(s)]) == s {
			return true
		}
	}
	return false
}

// span is one match: bytes [start, end).
type span struct{ start, end int }

// snapshot is a set of values as scans see it: one automaton, or two while
// a Secrets has changes its large automaton does not hold yet.
type snapshot struct {
	parts  []*automaton
	maxLen int // the longest match any form can make
}

func newSnapshot(t *unitTable, fs []form) *snapshot {
	sn := &snapshot{}
	if len(fs) > 0 {
		sn.add(buildAutomaton(t, fs))
	}
	return sn
}

func (sn *snapshot) add(a *automaton) {
	if a != nil && len(a.forms) > 0 {
		sn.parts = append(sn.parts, a)
		sn.maxLen = max(sn.maxLen, a.maxLen)
	}
}

// spans appends every match starting before safe (b past safe only
// completes them), sorted by start.
func (sn *snapshot) spans(ms []span, b []byte, safe int, fold bool) []span {
	for _, a := range sn.parts {
		ms = a.find(ms, b, safe, fold)
	}
	if len(sn.parts) > 1 || !sortedSpans(ms) {
		slices.SortFunc(ms, func(x, y span) int { return x.start - y.start })
	}
	return ms
}

func sortedSpans(ms []span) bool {
	for i := 1; i < len(ms); i++ {
		if ms[i].start < ms[i-1].start {
			return false
		}
	}
	return true
}

// render appends b[from:safe] to dst with every byte that lies inside a
// match of ms (sorted by start) replaced: a run of such bytes (overlapping
// matches merged) becomes one Redacted. end is where a redaction carried
// over from earlier input ends (bytes before it are inside it and not
// written). render returns dst and how many bytes past safe the last
// redaction covers.
func render(dst, b []byte, ms []span, from, safe, end int) ([]byte, int) {
	raw := max(from, end)
	for _, m := range ms {
		if m.start < from || m.start >= safe {
			continue
		}
		if m.start >= end {
			dst = append(dst, b[raw:m.start]...)
			dst = append(dst, Redacted...)
		}
		end = max(end, m.end)
		raw = end
	}
	if raw < safe {
		dst = append(dst, b[raw:safe]...)
	}
	return dst, max(end-safe, 0)
}

// scan is render of the matches sn finds in b.
func (sn *snapshot) scan(dst, b []byte, safe, end int) ([]byte, int) {
	var buf [16]span
	ms := sn.spans(buf[:0], b, safe, false)
	return render(dst, b, ms, 0, safe, end)
}

// Bytes returns b with every secret form replaced (b itself when none occurs).
func (s *Scrubber) Bytes(b []byte) []byte {
	var buf [16]span
	ms := s.snap().spans(buf[:0], b, len(b), false)
	if len(ms) == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+len(Redacted))
	out, _ = render(out, b, ms, 0, len(b), 0)
	return out
}

// String is Bytes for strings.
func (s *Scrubber) String(v string) string {
	var buf [16]span
	if len(s.snap().spans(buf[:0], []byte(v), len(v), false)) == 0 {
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
		b = append(b, lowerByte(name[i]))
	}
	var sb [4]span
	return len(s.snap().spans(sb[:0], b, len(b), true)) > 0
}

// Reader scrubs a stream without holding it whole: it keeps back only as
// many bytes as the longest form could straddle. It fails closed: when the
// source returns an error other than io.EOF, the bytes that came with it and
// those kept back (which may be the beginning of a secret) are dropped,
// never returned, and every later Read returns that error. A scrubber that
// follows a Secrets scrubs each chunk with the set as it is then.
func (s *Scrubber) Reader(r io.Reader) io.Reader {
	if s.live == nil && len(s.fixed.parts) == 0 {
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
		sn := r.s.snap()
		safe := len(r.held) - (sn.maxLen - 1)
		if err == io.EOF {
			safe, r.err = len(r.held), io.EOF
		}
		if safe <= 0 {
			continue
		}
		r.buf, r.covered = sn.scan(r.buf[:0], r.held, safe, r.covered)
		r.out = r.buf
		r.held = append(r.held[:0], r.held[safe:]...)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}
