package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalPath(t *testing.T) {
	allow := PathOptions{AllowSemicolons: true}
	tests := []struct {
		name    string
		in      string
		opts    PathOptions
		want    []string
		wantErr bool
	}{
		{name: "root", in: "/", want: nil},
		{name: "plain", in: "/repos/acme/widgets/issues", want: []string{"repos", "acme", "widgets", "issues"}},
		{name: "escaped space", in: "/a%20b", want: []string{"a b"}},
		{name: "lower-case hex is equivalent", in: "/caf%c3%a9", want: []string{"café"}},
		{name: "sub-delims stay", in: "/a,b;c=d:e@f", opts: allow, want: []string{"a,b;c=d:e@f"}},
		{name: "sub-delims without semicolon stay", in: "/a,b=c:d@e!$&'()*+", want: []string{"a,b=c:d@e!$&'()*+"}},
		{name: "fail-semicolon by default", in: "/a,b;c=d:e@f", wantErr: true},
		{name: "fail-jsessionid by default", in: "/api/items;jsessionid=0123", wantErr: true},
		{name: "fail-dotdot with empty params", in: "/api/..;/admin", wantErr: true},
		{name: "fail-dotdot with empty params allowed", in: "/api/..;/admin", opts: allow, wantErr: true},
		{name: "fail-dotdot with params allowed", in: "/api/..;a=b/admin", opts: allow, wantErr: true},
		{name: "fail-dot with params allowed", in: "/api/.;x/admin", opts: allow, wantErr: true},
		{name: "fail-encoded dotdot with params allowed", in: "/api/%2e%2E;x/admin", opts: allow, wantErr: true},
		{name: "fail-dotdot encoded semicolon allowed", in: "/api/..%3B/admin", opts: allow, wantErr: true},
		{name: "fail-dotdot encoded semicolon", in: "/api/..%3b/admin", wantErr: true},
		{name: "fail-empty name with params allowed", in: "/api/;x/admin", opts: allow, wantErr: true},
		{name: "fail-encoded semicolon allowed", in: "/api/a%3Bb", opts: allow, wantErr: true},
		{name: "matrix params allowed", in: "/api/items;v=2/x", opts: allow, want: []string{"api", "items;v=2", "x"}},
		{name: "dots inside a name with params allowed", in: "/api/...;x/a..;b", opts: allow, want: []string{"api", "...;x", "a..;b"}},
		{name: "fail-dotdot", in: "/repos/../admin", wantErr: true},
		{name: "fail-dot", in: "/repos/./acme", wantErr: true},
		{name: "fail-encoded dotdot", in: "/repos/%2e%2e/admin", wantErr: true},
		{name: "fail-mixed encoded dotdot", in: "/repos/.%2E/admin", wantErr: true},
		{name: "fail-double slash", in: "/repos//acme", wantErr: true},
		{name: "fail-trailing slash", in: "/repos/", wantErr: true},
		{name: "fail-encoded slash", in: "/repos/acme%2Fwidgets", wantErr: true},
		{name: "fail-encoded slash lower", in: "/repos/acme%2fwidgets", wantErr: true},
		{name: "fail-encoded backslash", in: "/repos/acme%5C..", wantErr: true},
		{name: "fail-raw backslash", in: "/repos/acme\\..\\admin", wantErr: true},
		{name: "fail-encoded NUL", in: "/repos/acme%00", wantErr: true},
		{name: "fail-control char", in: "/repos/a%0Ab", wantErr: true},
		{name: "fail-unnecessary escape", in: "/repos/%61cme", wantErr: true},
		{name: "double encoding stays literal", in: "/repos/%252e%252e", want: []string{"repos", "%2e%2e"}},
		{name: "fail-invalid escape", in: "/repos/%zz", wantErr: true},
		{name: "fail-invalid utf8", in: "/repos/%ff", wantErr: true},
		{name: "fail-relative", in: "repos", wantErr: true},
		{name: "fail-empty", in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalPath(tt.in, tt.opts)
			if tt.wantErr {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("CanonicalPath(%q) = %q, %v; want ErrBadRequest", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CanonicalPath(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CanonicalPath(%q) (-want +got):\n%s", tt.in, diff)
			}
			// What is forwarded is the canonical form of what was checked.
			segs, err := CanonicalPath(JoinPath(got), tt.opts)
			if err != nil || !cmp.Equal(segs, got) {
				t.Errorf("JoinPath(%q) = %q does not canonicalize to itself", got, JoinPath(got))
			}
		})
	}
}

func TestParseQuery(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Param
		wantErr bool
	}{
		{name: "empty", in: ""},
		{name: "ordered and repeated", in: "b=2&a=1&b=3", want: []Param{{"b", "2"}, {"a", "1"}, {"b", "3"}}},
		{name: "plus is space", in: "q=a+b%21", want: []Param{{"q", "a b!"}}},
		{name: "no value", in: "flag", want: []Param{{"flag", ""}}},
		{name: "fail-semicolon", in: "a=1;b=2", wantErr: true},
		{name: "fail-bad escape", in: "a=%zz", wantErr: true},
		{name: "fail-method override", in: "_method=DELETE", wantErr: true},
		{name: "fail-method override case", in: "_METHOD=DELETE", wantErr: true},
		{name: "fail-NUL", in: "a=%00", wantErr: true},
		{name: "fail-empty key", in: "=1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseQuery(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("ParseQuery(%q) = %v, %v; want ErrBadRequest", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
		detail  string // in the error, when wantErr
	}{
		{name: "object", in: `{"a": {"b": [1, 2, {"c": "d"}]}}`},
		{name: "fail-duplicate key", in: `{"amount": 1, "amount": 1000}`, wantErr: true, detail: `duplicate JSON key "amount"`},
		{name: "fail-nested duplicate key", in: `{"a": {"to": "x", "to": "y"}}`, wantErr: true},
		{name: "fail-upper-case variant", in: `{"to": "acme", "TO": "mallory"}`, wantErr: true, detail: `ambiguous JSON key "TO"`},
		{name: "fail-mixed-case variant", in: `{"amount": 1, "aMoUnT": 1000000}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-escaped variant", in: `{"to": "acme", "\u0054o": "mallory"}`, wantErr: true, detail: `ambiguous JSON key "To"`},
		{name: "fail-long s (Go folding)", in: `{"cost": 1, "co\u017ft": 1000000}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-long s raw", in: `{"status": "draft", "ſtatus": "published"}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-kelvin sign (Go folding)", in: `{"kind": "a", "\u212aind": "b"}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-dotless i (.NET upper-casing)", in: `{"id": 1, "\u0131d": 2}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-dotted capital I", in: `{"id": 1, "\u0130D": 2}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-greek final sigma", in: `{"\u03c3": 1, "\u03c2": 2}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-nested variant", in: `{"meta": {"label": "a", "Label": "b"}}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-variant inside an array", in: `{"items": [{"sku": "A-1"}, {"sku": "A-2", "SKU": "Z-9"}]}`, wantErr: true, detail: "ambiguous"},
		{name: "fail-variant in a top-level array", in: `[{"to": 1, "tO": 2}]`, wantErr: true, detail: "ambiguous"},
		{name: "variant keys in different objects", in: `{"to": "a", "meta": {"TO": "b"}, "items": [{"To": 1}, {"tO": 2}]}`},
		{name: "accents are not case", in: `{"to": 1, "tö": 2, "tô": 3}`},
		{name: "full case mappings are not folded", in: `{"ss": 1, "ß": 2}`},
		{name: "fail-trailing data", in: `{"a": 1} {"a": 2}`, wantErr: true},
		{name: "fail-invalid utf8", in: "{\"a\": \"\xff\"}", wantErr: true},
		{name: "fail-truncated", in: `{"a": `, wantErr: true},
		{name: "fail-too deep", in: string(repeat('[', 100)) + string(repeat(']', 100)), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJSON([]byte(tt.in))
			if tt.wantErr != (err != nil) {
				t.Fatalf("ParseJSON(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not ErrBadRequest", err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.detail) {
				t.Fatalf("error %q does not say %q", err, tt.detail)
			}
		})
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "/a%2fb", "/%2e%2e", "/a//b", "/caf%C3%A9", "/a\\b",
		"/a/..;/b", "/a/.;x/b", "/a;x/b", "/;x", "/a/%2e%2e;x", "/a/..%3B/b"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in string, allowSemicolons bool) {
		opts := PathOptions{AllowSemicolons: allowSemicolons}
		segs, err := CanonicalPath(in, opts)
		if err != nil {
			return
		}
		for _, s := range segs {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("CanonicalPath(%q) accepted segment %q", in, s)
			}
			for i := 0; i < len(s); i++ {
				if s[i] == '/' || s[i] == '\\' || s[i] == 0 {
					t.Fatalf("CanonicalPath(%q) accepted a segment with %q", in, s[i])
				}
			}
			// What a server that cuts segments at ";" resolves.
			name, _, params := strings.Cut(s, ";")
			if params && !allowSemicolons {
				t.Fatalf("CanonicalPath(%q) accepted a semicolon without the upstream's leave", in)
			}
			if name == "" || name == "." || name == ".." {
				t.Fatalf("CanonicalPath(%q) accepted segment %q, which is %q without its parameters", in, s, name)
			}
		}
		again, err := CanonicalPath(JoinPath(segs), opts)
		if err != nil || !cmp.Equal(again, segs) {
			t.Fatalf("JoinPath of %q is not canonical", in)
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":1,"a":2}`, `[1,{"b":[true,null]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseJSON(in)
		if err != nil {
			return
		}
		if _, ok, _ := lookup(v, nil); !ok {
			t.Fatal("lookup of the root failed")
		}
	})
}

// BenchmarkCanonicalize is the request canonicalization of the hot path:
// path, query and a small JSON body.
func BenchmarkCanonicalize(b *testing.B) {
	body := []byte(`{"amount": 50, "to": "acme", "currency": "EUR", "memo": "rent", "items": [{"sku": "A-1"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CanonicalPath("/repos/acme/widgets/issues/42/comments", PathOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := ParseQuery("page=2&per_page=50&sort=created"); err != nil {
			b.Fatal(err)
		}
		if _, err := ParseJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}

// parseJSONTokens is the earlier token-by-token parser, kept as the oracle
// ParseJSON is fuzzed against: it decodes a JSON document strictly: one value, no trailing data,
// valid UTF-8, no duplicate object keys (which two parsers could resolve
// differently), numbers kept as json.Number, nesting bounded.
func parseJSONTokens(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, badRequest("JSON body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := tokenValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("trailing data after JSON body")
	}
	return v, nil
}

func tokenValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, badRequest("JSON body nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, badRequest("malformed JSON body")
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			folded := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, badRequest("malformed JSON body")
				}
				key, ok := kt.(string)
				if !ok {
					return nil, badRequest("malformed JSON body")
				}
				if _, dup := obj[key]; dup {
					return nil, badRequest("duplicate JSON key %q", truncate(key, 64))
				}
				if folded[foldKey(key)] {
					return nil, badRequest("ambiguous JSON key %q", truncate(key, 64))
				}
				folded[foldKey(key)] = true
				v, err := tokenValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[key] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, badRequest("malformed JSON body")
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := tokenValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, badRequest("malformed JSON body")
			}
			return arr, nil
		}
		return nil, badRequest("malformed JSON body")
	default:
		return t, nil
	}
}

// FuzzParseJSONMatchesTokenParser: the fast parser accepts and refuses
// exactly what the token-by-token parser does, and decodes the same value.
func FuzzParseJSONMatchesTokenParser(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[1,{"b":[true,null]}]`, `{"a":{"b":1},"b":{"b":2}}`,
		`{"to":1,"TO":2}`, `{"s":1,"\u017f":2}`, `{"k":1,"\u212a":2}`, `{"I":1,"\u0131":2}`, `{"ss":1,"\u00df":2}`,
		`"x"`, `1e5`, `{"a":1} x`, `[[[[1]]]]`, `{"k":"v\"","k2":"a"}`, "{\"a\":\"\\\\\",\"a\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ParseJSON(in)
		want, werr := parseJSONTokens(in)
		if (err == nil) != (werr == nil) {
			t.Fatalf("ParseJSON(%q) err=%v, token parser err=%v", in, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseJSON(%q) = %#v, token parser %#v", in, got, want)
		}
	})
}

// TestParseJSONManyKeysVariant: past the first few keys, variants are
// found through the fold-key index.
func TestParseJSONManyKeysVariant(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"amount": 1`)
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, ",\"k%d\":%d", i, i)
	}
	b.WriteString(`,"AMOUNT":1000000}`)
	_, err := ParseJSON([]byte(b.String()))
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `ambiguous JSON key "AMOUNT"`) {
		t.Fatalf("a variant among many keys: %v", err)
	}
}

func TestParseJSONManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 50000; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\"k%d\":%d", i, i)
	}
	b.WriteString(`,"k49999":0}`)
	if _, err := ParseJSON([]byte(b.String())); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("a duplicate among many keys: %v", err)
	}
}

// The fast path of exactNumber (at most 15 significant digits) agrees with
// formatting the float64's shortest decimal, over random decimals of every
// length and a wide range of exponents.
func TestExactNumberFastPathAgrees(t *testing.T) {
	slow := func(s string, f float64) bool {
		a, ok := parseDec(s)
		if !ok {
			return false
		}
		b, ok := parseDec(strconv.AppendFloat(nil, f, 'e', -1, 64))
		return ok && a == b
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		digits := 1 + rng.IntN(17)
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(byte('1' + rng.IntN(9)))
		for j := 1; j < digits; j++ {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		fmt.Fprintf(&b, "e%d", rng.IntN(660)-340)
		s := b.String()
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			continue // out of range
		}
		if got, want := exactNumber(s, f), slow(s, f); got != want {
			t.Fatalf("exactNumber(%q) = %v, the shortest decimal says %v", s, got, want)
		}
	}
}

func TestExactNumber(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"100", true}, {"1e2", true}, {"100.000", true}, {"1.00E+2", true}, {"0.1", true}, {"-0", true}, {"0e999999999", true},
		{"9007199254740992", true}, {"1.7976931348623157e308", true}, {"5e-324", true}, {"123456789012345678e-2", false},
		{"100.00000000000000001", false}, {"9007199254740993", false}, {"0.30000000000000001", false},
		{"1e-400", false}, {"100000000000000000001e-18", false}, {"0.1000000000000000055511151231257827", false},
	} {
		f, err := strconv.ParseFloat(tc.s, 64)
		if err != nil && tc.want {
			t.Fatalf("%s: %v", tc.s, err)
		}
		if got := exactNumber(tc.s, f); got != tc.want {
			t.Errorf("exactNumber(%s) = %v, want %v", tc.s, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { exactNumber("100.25", 100.25) }); n != 0 {
		t.Errorf("exactNumber allocates %v times", n)
	}
}

func TestDotLike(t *testing.T) {
	for seg, want := range map[string]bool{
		".": true, "..": true, ". ": true, ".. ": true, "．．": true, ".．": true, "﹒": true, "․․": true, "‥": true,
		"...": false, " ..": false, "a.": false, "…": false, "‥.": false, " ": false, "..x": false,
	} {
		if got := dotLike(seg); got != want {
			t.Errorf("dotLike(%q) = %v, want %v", seg, got, want)
		}
	}
}
