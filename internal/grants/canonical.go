package grants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-broker/airlock/internal/fault"
)

// ErrBadRequest is returned (wrapped) when a sandbox request cannot be
// canonicalized: it is refused before any rule is consulted.
var ErrBadRequest = fault.New(fault.BadRequest, "bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, args...)...)
}

// PathOptions are an upstream's choices in path canonicalization.
type PathOptions struct {
	// AllowSemicolons lets path segments carry ";" (matrix parameters such as
	// "name;v=2"). Off by default: servers in the Tomcat and Spring tradition
	// cut a segment at ";" before resolving it, so "..;" climbs a level there
	// and "name;x" is "name". Even when allowed, a segment that is empty, "."
	// or ".." once its ";" part is cut off is refused.
	AllowSemicolons bool
}

// CanonicalPath checks an escaped request path (as sent on the wire) and
// returns its decoded segments. It rejects, rather than normalizes, anything
// that could be read two ways: "." and ".." segments (also percent-encoded,
// and with a ";" part: "..;x"), empty segments ("//"), encoded "/" "\" and
// NUL, raw backslashes, control characters, invalid escapes, any escaping
// that is not the canonical one, and ";" unless opts allow it.
// The path "/" yields no segments.
func CanonicalPath(escaped string, opts PathOptions) ([]string, error) {
	if escaped == "" || escaped[0] != '/' {
		return nil, badRequest("path must start with /")
	}
	if escaped == "/" {
		return nil, nil
	}
	rest := escaped[1:]
	segs := make([]string, 0, strings.Count(rest, "/")+1)
	for {
		raw, tail, more := strings.Cut(rest, "/")
		seg, err := canonicalSegment(raw, opts)
		if err != nil {
			return nil, err
		}
		segs = append(segs, seg)
		if !more {
			break
		}
		rest = tail
	}
	return segs, nil
}

func canonicalSegment(raw string, opts PathOptions) (string, error) {
	if raw == "" {
		return "", badRequest("empty path segment")
	}
	lower := strings.ToLower(raw)
	for _, bad := range []string{"%2f", "%5c", "%00"} {
		if strings.Contains(lower, bad) {
			return "", badRequest("encoded %q in path", bad)
		}
	}
	if strings.ContainsRune(raw, '\\') {
		return "", badRequest("backslash in path")
	}
	seg, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("invalid escape in path")
	}
	if dotLike(seg) {
		return "", badRequest("dot segment in path")
	}
	if name, _, params := strings.Cut(seg, ";"); params {
		// What a server that strips path parameters resolves.
		if dotLike(name) {
			return "", badRequest("dot segment with parameters in path")
		}
		if !opts.AllowSemicolons {
			return "", badRequest("semicolon in path (the upstream does not allow path parameters)")
		}
		if name == "" {
			return "", badRequest("empty path segment before parameters")
		}
	}
	if !utf8.ValidString(seg) {
		return "", badRequest("path is not valid UTF-8")
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] < 0x20 || seg[i] == 0x7f {
			return "", badRequest("control character in path")
		}
	}
	if EscapeSegment(seg) != upperEscapes(raw) {
		return "", badRequest("path is not in canonical form")
	}
	return seg, nil
}

// dotLike reports whether a decoded segment is, or is read by some server
// as, a "." or ".." segment: those, also with trailing spaces (". ", ".. ",
// which Windows and IIS trim), and with dots that Unicode compatibility
// normalization (NFKC, IIS's best-fit mapping) turns into ASCII dots:
// U+FF0E "．", U+FE52 "﹒", U+2024 "․" (one dot each), U+2025 "‥" (two).
func dotLike(seg string) bool {
	seg = strings.TrimRight(seg, " ")
	dots := 0
	for _, r := range seg {
		switch r {
		case '.', '\uFF0E', '\uFE52', '\u2024':
			dots++
		case '\u2025':
			dots += 2
		default:
			return false
		}
	}
	return dots == 1 || dots == 2
}

// upperEscapes upper-cases the hex digits of percent escapes, the one
// difference from canonical form that RFC 3986 treats as equivalent.
func upperEscapes(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = upperHex(b[i+1])
			b[i+2] = upperHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func upperHex(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// EscapeSegment is the canonical escaping of one path segment: RFC 3986
// pchar characters stay, everything else is percent-encoded in upper case.
func EscapeSegment(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isPchar(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isPchar(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

func isPchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@':
		return true
	}
	return false
}

// JoinPath is the canonical escaped form of decoded segments.
func JoinPath(segs []string) string {
	if len(segs) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(EscapeSegment(s))
	}
	return b.String()
}

// Param is one decoded query parameter, in the order it was sent.
type Param struct {
	Key, Value string
}

// ParseQuery decodes a raw query string strictly: invalid escapes, semicolon
// separators, control characters and the "_method" override key are refused.
// Order and repetitions are kept; rules decide whether a repeat is allowed.
func ParseQuery(raw string) ([]Param, error) {
	if raw == "" {
		return nil, nil
	}
	if strings.ContainsRune(raw, ';') {
		return nil, badRequest("semicolon in query")
	}
	params := make([]Param, 0, strings.Count(raw, "&")+1)
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, badRequest("invalid escape in query key")
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, badRequest("invalid escape in query value")
		}
		if key == "" {
			return nil, badRequest("empty query key")
		}
		if !validText(key) || !validText(val) {
			return nil, badRequest("query is not valid text")
		}
		if strings.EqualFold(key, "_method") {
			return nil, badRequest("method override in query")
		}
		params = append(params, Param{Key: key, Value: val})
	}
	return params, nil
}

// EncodeQuery re-encodes checked parameters in their original order.
func EncodeQuery(params []Param) string {
	if len(params) == 0 {
		return ""
	}
	var b strings.Builder
	for i, p := range params {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(p.Key))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(p.Value))
	}
	return b.String()
}

func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// ParseJSON decodes a JSON document strictly: one value, no trailing data,
// valid UTF-8, no duplicate object keys (which two parsers could resolve
// differently), not even keys that differ only in case (equal fold keys,
// which a case-insensitive decoder reads as one field), numbers kept as
// json.Number, nesting bounded. Evaluate relies on this: in a parsed body,
// at most one key of an object has a given fold key. The standard
// decoder parses; a scan of the (then known valid) bytes finds duplicate
// keys and excess depth without allocating per token.
func ParseJSON(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, badRequest("JSON body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, badRequest("malformed JSON body")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("trailing data after JSON body")
	}
	if err := checkKeys(data); err != nil {
		return nil, err
	}
	return v, nil
}

const maxJSONDepth = 64

// checkKeys walks a valid JSON document for object keys that name the same
// field (compared after unescaping, by fold key: "to" and "TO" are one field
// to a case-insensitive decoder) and for values nested deeper than
// maxJSONDepth.
func checkKeys(data []byte) error {
	type frame struct {
		obj       bool
		expectKey bool
		first     int               // the frame's keys are keys[first:] (the frames nest: one stack of keys serves all)
		set       map[string]string // all keys by fold key, once there are many (no quadratic scan)
	}
	// Keys are substrings of one copy of the document (no allocation per
	// key unless it holds escapes), kept on one stack for every frame.
	doc := string(data)
	var (
		stackBuf [16]frame
		keyBuf   [32]string
	)
	stack, keys := stackBuf[:0], keyBuf[:0]
	for i := 0; i < len(doc); {
		switch c := doc[i]; c {
		case ' ', '\t', '\r', '\n', ':':
			i++
		case ',':
			if n := len(stack); n > 0 && stack[n-1].obj {
				stack[n-1].expectKey = true
			}
			i++
		case '{', '[':
			if len(stack) > maxJSONDepth {
				return errTooDeep
			}
			stack = append(stack, frame{obj: c == '{', expectKey: c == '{', first: len(keys)})
			i++
		case '}', ']':
			keys = keys[:stack[len(stack)-1].first]
			stack = stack[:len(stack)-1]
			i++
		case '"':
			j, escaped := scanString(data, i)
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].expectKey {
				top := &stack[n-1]
				key := doc[i+1 : j-1]
				if escaped {
					if err := json.Unmarshal(data[i:j], &key); err != nil {
						return badRequest("malformed JSON body")
					}
				}
				other, dup := "", false
				if top.set != nil {
					fk := foldKey(key)
					other, dup = top.set[fk]
					top.set[fk] = key
				} else {
					for _, k := range keys[top.first:] {
						if k == key || foldEqual(k, key) {
							other, dup = k, true
							break
						}
					}
					keys = append(keys, key)
					if len(keys)-top.first > 16 {
						top.set = make(map[string]string, 64)
						for _, k := range keys[top.first:] {
							top.set[foldKey(k)] = k
						}
					}
				}
				switch {
				case dup && other == key:
					return badRequest("duplicate JSON key %q", truncate(key, 64))
				case dup:
					return badRequest("ambiguous JSON key %q: it names the same field as another key to a case-insensitive reader", truncate(key, 64))
				}
				top.expectKey = false
			} else if len(stack) > maxJSONDepth {
				return errTooDeep
			}
			i = j
		default: // number, true, false, null
			if len(stack) > maxJSONDepth {
				return errTooDeep
			}
			for i < len(doc) && !strings.ContainsRune(",}] \t\r\n", rune(doc[i])) {
				i++
			}
		}
	}
	return nil
}

// errTooDeep: a value nested deeper than maxJSONDepth.
var errTooDeep = badRequest("JSON body nested too deeply")

// scanString returns the index after the string starting at data[i] and
// whether it holds escapes.
func scanString(data []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return len(data), escaped
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseDecimal parses a number written in JSON's number grammar. Hex, NaN,
// Inf, underscores and out-of-range values, which strconv would accept or
// round, are refused so that every reader sees the same value.
func parseDecimal(s string) (float64, bool) {
	if !isJSONNumber(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return f, true
}

// exactNumber reports whether the decimal s (JSON's number grammar) has
// exactly the value of f, its nearest float64, written as the shortest
// decimal that reads back as f. Then a reader that parses s exactly
// (a decimal or big-integer type, an int64) and the broker, which compares
// f, read the same number, and comparisons with the grant's values (also
// float64, written as the operator wrote them) are exact. A number with
// more precision than a float64 holds ("100.00000000000000001",
// 9007199254740993) is not exact: checked as its rounding, it would be
// read as itself. It allocates nothing.
func exactNumber(s string, f float64) bool {
	var buf [32]byte
	a, ok := parseDec(s)
	if !ok {
		return false
	}
	if a.n > 0 && a.n <= 15 && a.exp > -290 && a.exp < 290 {
		// Any decimal of at most 15 significant digits in the normal range
		// is the shortest decimal of its float64 (DBL_DIG): no formatting.
		return true
	}
	b, ok := parseDec(strconv.AppendFloat(buf[:0], f, 'e', -1, 64))
	return ok && a == b
}

// dec is a decimal's value as 0.d[0]d[1]...d[n-1] × 10^exp, with no leading
// or trailing zero digits (zero: n == 0, exp == 0, not negative).
type dec struct {
	neg bool
	n   int
	d   [24]byte
	exp int
}

// parseDec reads a number in JSON's grammar (or strconv's 'e' format); it
// fails on more than len(dec.d) significant digits, which no float64's
// shortest decimal has.
func parseDec[T string | []byte](s T) (dec, bool) {
	var x dec
	i := 0
	if i < len(s) && s[i] == '-' {
		x.neg = true
		i++
	}
	point, zeros := false, 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			point = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		switch {
		case c == '0' && x.n == 0: // a leading zero
			if point {
				x.exp--
			}
			continue
		case c == '0':
			zeros++
		default:
			if x.n+zeros+1 > len(x.d) {
				return dec{}, false
			}
			for ; zeros > 0; zeros-- {
				x.d[x.n] = '0'
				x.n++
			}
			x.d[x.n] = c
			x.n++
		}
		if !point {
			x.exp++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		neg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg = s[i] == '-'
			i++
		}
		e := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if e < 1e6 {
				e = 10*e + int(s[i]-'0')
			}
		}
		if neg {
			e = -e
		}
		x.exp += e
	}
	if x.n == 0 {
		return dec{}, true
	}
	return x, true
}

func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return false
	}
	if s[i] == '0' {
		i++
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}
