package mcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrNotCanonicalizable is returned for a value that has no JSON form the
// broker writes: a NaN or infinite number, a number outside float64's
// range (1e400), a json.Number that is not JSON's number grammar, a string
// that is not valid UTF-8, or nesting past maxEncodeDepth.
var ErrNotCanonicalizable = errors.New("mcp: value has no canonical JSON form")

// maxEncodeDepth bounds the nesting of what is encoded; parsed messages
// are far shallower (grants.ParseJSON caps them at 64).
const maxEncodeDepth = 256

// Canonical is the RFC 8785 (JCS) form of v: object members sorted by the
// UTF-16 code units of their names, no whitespace, strings with only the
// mandatory escapes, numbers as ECMAScript writes the float64 they denote.
// v is what grants.ParseJSON or encoding/json produce (map[string]any,
// []any, string, bool, nil, json.Number, float64); integers, []string,
// map[string]string and other values encoding/json marshals are accepted
// through their JSON form.
func Canonical(v any) ([]byte, error) {
	e := encoder{canonical: true, buf: make([]byte, 0, 256)}
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// Digest is "sha256:" and the lowercase hex SHA-256 of v's JCS form.
func Digest(v any) (string, error) {
	sum, err := jcsSum(v)
	if err != nil {
		return "", err
	}
	return "sha256:" + sum, nil
}

// ToolDigest is the digest that pins a tool (DESIGN §10): Digest of the
// object of its name, description, inputSchema and annotations as served,
// the members the server left out left out.
func ToolDigest(tool map[string]any) (string, error) {
	pinned := make(map[string]any, 4)
	for _, k := range []string{"name", "description", "inputSchema", "annotations"} {
		if v, ok := tool[k]; ok {
			pinned[k] = v
		}
	}
	return Digest(pinned)
}

// ArgsSHA256 is the lowercase hex SHA-256 of the JCS form of a tool call's
// arguments, without prefix: the audit record's args_sha256.
func ArgsSHA256(args map[string]any) (string, error) {
	if args == nil {
		args = map[string]any{}
	}
	return jcsSum(args)
}

func jcsSum(v any) (string, error) {
	b, err := Canonical(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// marshalWire is the JSON form the broker sends: JCS's shape (sorted
// members, minimal escapes) but a json.Number written as it was read, so
// that a number the broker checked reaches the peer digit for digit
// (12345678901234567890 is not rounded to 12345678901234567000).
func marshalWire(v any) ([]byte, error) {
	e := encoder{}
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// encoder writes JSON. canonical: numbers as JCS writes them; otherwise a
// json.Number verbatim (checked to be JSON's grammar and finite) and
// integers exactly.
type encoder struct {
	buf       []byte
	canonical bool
}

func (e *encoder) value(v any, depth int) error {
	if depth > maxEncodeDepth {
		return fmt.Errorf("%w: nested too deeply", ErrNotCanonicalizable)
	}
	switch v := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		e.buf = strconv.AppendBool(e.buf, v)
	case string:
		return e.string(v)
	case json.Number:
		return e.number(v)
	case float64:
		return e.float(v)
	case float32:
		return e.float(float64(v))
	case int:
		return e.int(int64(v))
	case int64:
		return e.int(v)
	case int32:
		return e.int(int64(v))
	case map[string]any:
		return e.object(v, depth)
	case []any:
		e.buf = append(e.buf, '[')
		for i, x := range v {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.value(x, depth+1); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
	default:
		return e.other(v, depth)
	}
	return nil
}

// other encodes any other value through its encoding/json form, read back
// as the generic values (numbers as json.Number).
func (e *encoder) other(v any, depth int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	return e.value(g, depth)
}

func (e *encoder) object(m map[string]any, depth int) error {
	var small [8]string // most objects' keys, without an allocation
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.string(k); err != nil {
			return err
		}
		e.buf = append(e.buf, ':')
		if err := e.value(m[k], depth+1); err != nil {
			return err
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// string writes s with JCS's escapes: \b \t \n \f \r \" \\ by name, the
// other controls as \u00xx (lowercase hex), everything else as itself.
func (e *encoder) string(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: string is not valid UTF-8", ErrNotCanonicalizable)
	}
	const hexDigits = "0123456789abcdef"
	e.buf = append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		e.buf = append(e.buf, s[start:i]...)
		switch c {
		case '"', '\\':
			e.buf = append(e.buf, '\\', c)
		case '\b':
			e.buf = append(e.buf, '\\', 'b')
		case '\t':
			e.buf = append(e.buf, '\\', 't')
		case '\n':
			e.buf = append(e.buf, '\\', 'n')
		case '\f':
			e.buf = append(e.buf, '\\', 'f')
		case '\r':
			e.buf = append(e.buf, '\\', 'r')
		default:
			e.buf = append(e.buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	e.buf = append(e.buf, s[start:]...)
	e.buf = append(e.buf, '"')
	return nil
}

func (e *encoder) number(n json.Number) error {
	s := string(n)
	if !isJSONNumber(s) {
		return fmt.Errorf("%w: %q is not a JSON number", ErrNotCanonicalizable, truncate(s, 32))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // out of float64's range
		return fmt.Errorf("%w: number %s is out of range", ErrNotCanonicalizable, truncate(s, 32))
	}
	if !e.canonical {
		e.buf = append(e.buf, s...)
		return nil
	}
	return e.float(f)
}

func (e *encoder) int(n int64) error {
	if !e.canonical {
		e.buf = strconv.AppendInt(e.buf, n, 10)
		return nil
	}
	return e.float(float64(n))
}

func (e *encoder) float(f float64) error {
	var err error
	e.buf, err = appendES(e.buf, f)
	return err
}

// appendES appends f as ECMAScript's Number.prototype.toString writes it
// (ECMA-262 Number::toString, which JCS adopts): the shortest digits that
// read back as f, in plain notation for exponents in [-7, 21), otherwise as
// d.ddde±x; -0 is 0. NaN and the infinities have no JSON form.
func appendES(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("%w: %v", ErrNotCanonicalizable, f)
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var b [32]byte
	s := strconv.AppendFloat(b[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	ei := bytes.IndexByte(s, 'e')
	exp, _ := strconv.Atoi(string(s[ei+1:]))
	digits := make([]byte, 0, 17)
	for _, c := range s[:ei] {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	k, n := len(digits), exp+1 // f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		dst = append(dst, bytes.Repeat([]byte{'0'}, n-k)...)
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		dst = append(dst, bytes.Repeat([]byte{'0'}, -n)...)
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}

// compareUTF16 orders strings by their UTF-16 code units, as JCS sorts
// member names: as code points, except that a character past U+FFFF (two
// surrogates, 0xD800...) sorts before U+E000-U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ka, kb := ra, rb
			switch {
			case ra > 0xFFFF && rb <= 0xFFFF:
				ka = 0xD800
			case rb > 0xFFFF && ra <= 0xFFFF:
				kb = 0xD800
			}
			if ka < kb {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// isJSONNumber reports whether s is JSON's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
