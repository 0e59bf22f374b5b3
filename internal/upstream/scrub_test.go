package upstream

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf16"
)

const canary = "CANARY-s3cr3t/with+chars=&ok"

// canaryUnicode has what encoders treat specially: non-ASCII (a surrogate
// pair in UTF-16), a space, quotes, a backslash, <, >, and characters that
// encoders disagree on escaping.
const canaryUnicode = "CANARY é😀 \"q\\x<y>'~(z)*!"

// canaryControl has the control characters JSON escapes in short form.
const canaryControl = "CANARY-ctl\t\r\n\b\f-end"

// jsonShortEscapes writes \b \f \n \r \t \" \\ \/ in their short forms.
func jsonShortEscapes(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "/", `\/`, "\b", `\b`, "\f", `\f`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
}

// forms are the encodings of secret that encoders really write; a response
// must carry none of them.
func forms(secret string) []string {
	out := []string{
		secret,
		url.QueryEscape(secret), url.PathEscape(secret),
		lowerHexEscapes(url.QueryEscape(secret)), lowerHexEscapes(url.PathEscape(secret)),
		jsURIComponent(secret), mixedCaseEscapes(url.QueryEscape(secret)),
		percentAll(secret, hexUpper), percentAll(secret, hexLower),
		jsonString(secret, true), jsonString(secret, false),
		strings.ReplaceAll(jsonString(secret, false), "/", `\/`), // PHP's json_encode
		jsonAllEscaped(secret, false), jsonAllEscaped(secret, true),
		html.EscapeString(secret), template.HTMLEscapeString(secret), xmlDecimal(secret), xmlHex(secret, false), xmlHex(secret, true),
		hex.EncodeToString([]byte(secret)), strings.ToUpper(hex.EncodeToString([]byte(secret))), mixedCaseHex(secret),
		utf16Bytes(secret, false), utf16Bytes(secret, true),
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(secret)))
	}
	return out
}

func lowerHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = bytes.ToLower(b[i+1 : i+2])[0], bytes.ToLower(b[i+2 : i+3])[0]
		}
	}
	return string(b)
}

func mixedCaseEscapes(s string) string {
	b := []byte(s)
	n := 0
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			if n++; n%2 == 0 {
				b[i+1], b[i+2] = bytes.ToLower(b[i+1 : i+2])[0], bytes.ToLower(b[i+2 : i+3])[0]
			}
		}
	}
	return string(b)
}

// jsURIComponent is JavaScript's encodeURIComponent: it leaves
// A-Z a-z 0-9 - _ . ! ~ * ' ( ) as they are.
func jsURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func percentAll(s, digits string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString("%" + string(digits[s[i]>>4]) + string(digits[s[i]&15]))
	}
	return b.String()
}

func jsonString(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s)
	return strings.TrimSuffix(strings.TrimSpace(b.String()), `"`)[1:]
}

// jsonAllEscaped writes every character as \uXXXX (as Python's ensure_ascii
// does for non-ASCII).
func jsonAllEscaped(s string, upper bool) string {
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(s)) {
		e := fmt.Sprintf(`\u%04x`, u)
		if upper {
			e = `\u` + strings.ToUpper(e[2:])
		}
		b.WriteString(e)
	}
	return b.String()
}

func xmlDecimal(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, "&#%d;", r)
	}
	return b.String()
}

func xmlHex(s string, upper bool) string {
	var b strings.Builder
	for _, r := range s {
		h := fmt.Sprintf("%x", r)
		if upper {
			h = strings.ToUpper(h)
		}
		b.WriteString("&#x" + h + ";")
	}
	return b.String()
}

func mixedCaseHex(s string) string {
	b := []byte(hex.EncodeToString([]byte(s)))
	for i := range b {
		if i%3 == 0 {
			b[i] = bytes.ToUpper(b[i : i+1])[0]
		}
	}
	return string(b)
}

func utf16Bytes(s string, bigEndian bool) string {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		if bigEndian {
			b = append(b, byte(u>>8), byte(u))
		} else {
			b = append(b, byte(u), byte(u>>8))
		}
	}
	return string(b)
}

func TestScrubberEveryForm(t *testing.T) {
	for _, secret := range []string{canary, canaryUnicode, canaryControl} {
		s := NewScrubber(secret)
		for i, f := range append(forms(secret), jsonShortEscapes(secret)) {
			pad := f[len(strings.TrimRight(f, "=")):] // base64 padding carries no secret
			want := "before " + Redacted + pad + " after"
			if got := s.String("before " + f + " after"); got != want {
				t.Errorf("%q form %d %q:\n got %q\nwant %q", secret, i, f, got, want)
			}
		}
		if got := s.String("nothing secret here, 100% \\u0041 &amp; 4142"); got != "nothing secret here, 100% \\u0041 &amp; 4142" {
			t.Errorf("clean text changed: %q", got)
		}
	}
}

// Inside a longer base64 value, every character holding a bit of the secret
// goes, whatever its alignment, its neighbours and the padding.
func TestScrubberBase64Embedded(t *testing.T) {
	for _, secret := range []string{canary, canaryUnicode} {
		s := NewScrubber(secret)
		for _, prefix := range []string{"", "u", "us", "user:"} {
			for _, suffix := range []string{"", "-", "-t", "-tail"} {
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
					e := enc.EncodeToString([]byte(prefix + secret + suffix))
					k, n := len(prefix), len(prefix)+len(secret)
					want := "x " + e[:8*k/6] + Redacted + e[(8*n-1)/6+1:] + " y"
					if got := s.String("x " + e + " y"); got != want {
						t.Errorf("prefix %q suffix %q: got %q, want %q", prefix, suffix, got, want)
					}
				}
			}
		}
	}
}

func TestScrubberDerivedValuesAndOverlaps(t *testing.T) {
	s := NewScrubber("xxSECRETyy", "SECRETyyzz")
	if got := s.String("a xxSECRETyyzz b"); got != "a "+Redacted+" b" {
		t.Errorf("overlapping matches: got %q", got)
	}
	s = NewScrubber(canary, "Bearer "+canary)
	if got := s.String(`{"h":"Bearer ` + jsonString(canary, true) + `"}`); got != `{"h":"`+Redacted+`"}` {
		t.Errorf("derived value: got %q", got)
	}
}

func TestScrubberHeaderNames(t *testing.T) {
	s := NewScrubber(canary)
	for _, f := range []string{
		hex.EncodeToString([]byte(canary)), strings.ToUpper(hex.EncodeToString([]byte(canary))),
		base64.RawURLEncoding.EncodeToString([]byte(canary)), url.QueryEscape(canary), "Canary-S3cr3t",
	} {
		name := http.CanonicalHeaderKey("x-echo-" + f)
		if f == "Canary-S3cr3t" {
			continue
		}
		if !s.NameHasSecret(name) {
			t.Errorf("header name %q not recognized", name)
		}
	}
	for _, name := range []string{"Content-Type", "X-Canary-S3cr3t", "Etag"} {
		if s.NameHasSecret(name) {
			t.Errorf("header name %q flagged", name)
		}
	}
	dst := http.Header{}
	ResponseHeader(dst, http.Header{
		http.CanonicalHeaderKey("X-Echo-" + hex.EncodeToString([]byte(canary))): {"1"},
		"X-Ok": {"v " + canary}, "Set-Cookie": {"a=b"}, "Connection": {"X-Hop"}, "X-Hop": {"1"},
	}, s)
	if fmt.Sprint(dst) != "map[X-Ok:[v "+Redacted+"]]" {
		t.Errorf("ResponseHeader = %v", dst)
	}
}

func TestScrubberReaderAcrossChunks(t *testing.T) {
	s := NewScrubber(canary)
	var in bytes.Buffer
	all := forms(canary)
	for i := 0; i < 5000; i++ {
		in.WriteString("chunk ")
		in.WriteString(all[i%len(all)])
		in.WriteString(" ")
	}
	want := s.String(in.String())
	// One byte at a time and in odd sizes: a secret straddling any boundary is still caught.
	for name, r := range map[string]io.Reader{
		"one byte": iotest.OneByteReader(bytes.NewReader(in.Bytes())),
		"half":     iotest.HalfReader(bytes.NewReader(in.Bytes())),
		"data+EOF": iotest.DataErrReader(bytes.NewReader(in.Bytes())),
		"whole":    bytes.NewReader(in.Bytes()),
	} {
		got, err := io.ReadAll(s.Reader(r))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s: streamed result differs from whole-buffer result", name)
		}
		for _, f := range all {
			if bytes.Contains(got, []byte(f)) {
				t.Fatalf("%s: %q survived", name, f)
			}
		}
	}
}

// chunkReader returns its chunks one per Read, the last one together with err.
type chunkReader struct {
	chunks []string
	err    error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, r.err
	}
	n := copy(p, r.chunks[0])
	r.chunks = r.chunks[1:]
	if len(r.chunks) == 0 {
		return n, r.err
	}
	return n, nil
}

// A read that returns bytes and an error lets none of them out, nor the
// bytes held back that could begin a secret: the stream stops with the error.
func TestScrubberReaderFailsClosed(t *testing.T) {
	errReset := errors.New("connection reset by peer")
	half := canary[:len(canary)/2]
	lead := strings.Repeat("a", 100<<10)
	for _, tc := range []struct {
		name   string
		chunks []string
	}{
		{"data with the error", []string{"hello " + half}},
		{"whole secret with the error", []string{"hello " + canary}},
		{"after a long clean stretch", []string{lead, "hello " + half}},
		{"prefix held, then the error", []string{lead + " hello " + half, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewScrubber(canary).Reader(&chunkReader{chunks: tc.chunks, err: errReset})
			got, err := io.ReadAll(r)
			if !errors.Is(err, errReset) {
				t.Fatalf("err = %v, want the read error", err)
			}
			if bytes.Contains(got, []byte(half[:8])) || bytes.Contains(got, []byte("hello")) {
				t.Fatalf("bytes read with or before the error came out: %q", tail(got))
			}
			if !strings.HasPrefix(lead, string(got)) {
				t.Fatalf("unexpected output %q", tail(got))
			}
			if n, err := r.Read(make([]byte, 10)); n != 0 || !errors.Is(err, errReset) {
				t.Fatalf("Read after the error = %d, %v", n, err)
			}
		})
	}
	// At a clean end what was held is scrubbed and sent.
	got, err := io.ReadAll(NewScrubber(canary).Reader(&chunkReader{chunks: []string{"x " + canary[:5], canary[5:] + " y"}, err: io.EOF}))
	if err != nil || string(got) != "x "+Redacted+" y" {
		t.Fatalf("clean end: %q, %v", got, err)
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-40):] }

func gzipped(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.Bytes()
}

func TestDecodeResponse(t *testing.T) {
	body := "the answer: " + canary
	var zl, raw bytes.Buffer
	zw := zlib.NewWriter(&zl)
	_, _ = zw.Write([]byte(body))
	_ = zw.Close()
	fw, _ := flate.NewWriter(&raw, 5)
	_, _ = fw.Write([]byte(body))
	_ = fw.Close()
	for _, tc := range []struct {
		name     string
		encoding []string
		data     []byte
		wantErr  bool
	}{
		{name: "none", data: []byte(body)},
		{name: "identity", encoding: []string{"identity"}, data: []byte(body)},
		{name: "empty value", encoding: []string{""}, data: []byte(body)},
		{name: "gzip", encoding: []string{"gzip"}, data: gzipped(body)},
		{name: "GZIP", encoding: []string{"GZIP"}, data: gzipped(body)},
		{name: "x-gzip", encoding: []string{"x-gzip"}, data: gzipped(body)},
		{name: "deflate (zlib)", encoding: []string{"deflate"}, data: zl.Bytes()},
		{name: "deflate (raw)", encoding: []string{"deflate"}, data: raw.Bytes()},
		{name: "fail-br", encoding: []string{"br"}, wantErr: true},
		{name: "fail-zstd", encoding: []string{"zstd"}, wantErr: true},
		{name: "fail-two values", encoding: []string{"gzip, br"}, wantErr: true},
		{name: "fail-gzip twice", encoding: []string{"gzip, gzip"}, wantErr: true},
		{name: "fail-identity then gzip", encoding: []string{"identity, gzip"}, wantErr: true},
		{name: "fail-two lines", encoding: []string{"gzip", "gzip"}, wantErr: true},
		{name: "fail-two lines identity first", encoding: []string{"identity", "gzip"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Content-Length": {fmt.Sprint(len(tc.data))}}
			if tc.encoding != nil {
				h["Content-Encoding"] = tc.encoding
			}
			resp := &http.Response{Header: h, Body: io.NopCloser(bytes.NewReader(tc.data)), ContentLength: int64(len(tc.data))}
			err := decodeResponse(resp)
			if tc.wantErr {
				if !errors.Is(err, ErrUpstream) {
					t.Fatalf("err = %v, want ErrUpstream", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != body {
				t.Fatalf("body = %q, %v", got, err)
			}
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding left: %q", resp.Header.Get("Content-Encoding"))
			}
			if tc.encoding != nil && tc.encoding[0] != "" && tc.encoding[0] != "identity" && (resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "") {
				t.Errorf("Content-Length of the encoded body kept")
			}
		})
	}
	// An empty encoded body (HEAD, 204) decodes to nothing; a corrupt one is an error.
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: http.NoBody}
	if err := decodeResponse(resp); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || len(got) != 0 {
		t.Fatalf("empty gzip body: %q, %v", got, err)
	}
	resp = &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(strings.NewReader(body))}
	if err := decodeResponse(resp); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a body that is not gzip decoded without error")
	}
}

// A gzip answer cut off mid-secret: the decoder returns the bytes it has
// with an error; the scrubbed stream carries no part of the secret.
func TestDecodedTruncatedBodyFailsClosed(t *testing.T) {
	full := gzipped(strings.Repeat("z", 64<<10) + " " + canary + " end")
	half := canary[:len(canary)/2]
	for cut := len(full) - 1; cut > len(full)-40; cut-- {
		resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(bytes.NewReader(full[:cut]))}
		if err := decodeResponse(resp); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(NewScrubber(canary).Reader(resp.Body))
		if err == nil {
			t.Fatalf("cut at %d: no error", cut)
		}
		if bytes.Contains(got, []byte(half[:6])) {
			t.Fatalf("cut at %d: part of the secret came out: %q", cut, tail(got))
		}
	}
}

// swapSource is a credential that the test rotates.
type swapSource struct {
	mu sync.Mutex
	v  string
}

func (s *swapSource) set(v string) { s.mu.Lock(); s.v = v; s.mu.Unlock() }
func (s *swapSource) Fetch(context.Context) (Secret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return NewSecret(s.v), nil
}
func (s *swapSource) Describe() string { return "swap" }

func TestRotationGrace(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	src := &swapSource{v: canary + "-A"}
	u := &Upstream{Name: "x", Source: src, RotationGrace: time.Hour, Clock: func() time.Time { return now },
		Inject: Injection{Header: "Authorization", Format: "Bearer {secret}"}}
	cred := func() Credential {
		t.Helper()
		c, err := u.Credential(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	redacts := func(c Credential, v string) bool { return c.Scrub.String("x "+v+" y") == "x "+Redacted+" y" }
	a := cred()
	if b := cred(); b.Scrub != a.Scrub {
		t.Fatal("an unchanged credential rebuilt its scrubber")
	}
	src.set(canary + "-B-longer")
	b := cred()
	if !redacts(b, canary+"-A") || !redacts(b, canary+"-B-longer") {
		t.Fatal("after rotation the old or the new secret is not scrubbed")
	}
	now = now.Add(59 * time.Minute)
	if !redacts(cred(), canary+"-A") {
		t.Fatal("the old secret is not scrubbed within the grace")
	}
	now = now.Add(2 * time.Minute)
	c := cred()
	if redacts(c, canary+"-A") || !redacts(c, canary+"-B-longer") {
		t.Fatal("after the grace: the old secret still scrubbed, or the new one not")
	}
	if cred().Scrub != c.Scrub {
		t.Fatal("the scrubber is rebuilt on every call after the grace ended")
	}

	// Without a grace the old secret goes at once; the retired list is bounded.
	u = &Upstream{Name: "y", Source: src, Clock: func() time.Time { return now }}
	cred()
	src.set(canary + "-C")
	if redacts(cred(), canary+"-B-longer") {
		t.Fatal("scrubbed without a grace")
	}
	u.RotationGrace = time.Hour
	for i := range maxRetired + 4 {
		src.set(fmt.Sprintf("%s-r%02d", canary, i))
		cred()
	}
	c = cred()
	if redacts(c, canary+"-r02") || !redacts(c, canary+"-r04") {
		t.Fatalf("want the %d latest retired credentials kept", maxRetired)
	}
}

func BenchmarkScrub4KB(b *testing.B) {
	s := NewScrubber("ghp_0123456789abcdefghijklmnopqrstuvwxyz", "Bearer ghp_0123456789abcdefghijklmnopqrstuvwxyz")
	body := bytes.Repeat([]byte(`{"id": 12345, "name": "widget", "tags": ["a", "b"]},`), 80)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Bytes(body)
	}
}
