package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "root", in: "/", want: nil},
		{name: "plain", in: "/repos/acme/widgets/issues", want: []string{"repos", "acme", "widgets", "issues"}},
		{name: "escaped space", in: "/a%20b", want: []string{"a b"}},
		{name: "lower-case hex is equivalent", in: "/caf%c3%a9", want: []string{"café"}},
		{name: "sub-delims stay", in: "/a,b;c=d:e@f", want: []string{"a,b;c=d:e@f"}},
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
			got, err := CanonicalPath(tt.in)
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
			segs, err := CanonicalPath(JoinPath(got))
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
	}{
		{name: "object", in: `{"a": {"b": [1, 2, {"c": "d"}]}}`},
		{name: "fail-duplicate key", in: `{"amount": 1, "amount": 1000}`, wantErr: true},
		{name: "fail-nested duplicate key", in: `{"a": {"to": "x", "to": "y"}}`, wantErr: true},
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
	for _, s := range []string{"/", "/a/b", "/a/../b", "/a%2fb", "/%2e%2e", "/a//b", "/caf%C3%A9", "/a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		segs, err := CanonicalPath(in)
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
		}
		again, err := CanonicalPath(JoinPath(segs))
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
		if _, ok := lookup(v, nil); !ok {
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
		if _, err := CanonicalPath("/repos/acme/widgets/issues/42/comments"); err != nil {
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
