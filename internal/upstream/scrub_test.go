package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

const canary = "CANARY-s3cr3t/with+chars=&ok"

// forms are every encoding of the canary a response must never carry.
func forms(secret string) []string {
	out := []string{secret, url.QueryEscape(secret), url.PathEscape(secret)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(secret)))
	}
	return out
}

func TestScrubberForms(t *testing.T) {
	s := NewScrubber(canary)
	for _, prefix := range []string{"", "u", "us", "user:"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			embedded := enc.EncodeToString([]byte(prefix + canary + "-tail"))
			out := s.String("x " + embedded + " y")
			if !strings.Contains(out, Redacted) || strings.Contains(out, embedded) {
				t.Errorf("base64 with %d-byte prefix not scrubbed: %s", len(prefix), out)
			}
		}
	}
	for _, f := range forms(canary) {
		out := s.String("before " + f + " after")
		if strings.Contains(out, f) || !strings.Contains(out, Redacted) {
			t.Errorf("form %q not scrubbed: %q", f, out)
		}
		if !strings.HasPrefix(out, "before ") || !strings.HasSuffix(out, " after") {
			t.Errorf("surrounding text damaged: %q", out)
		}
	}
	if got := s.String("nothing secret here"); got != "nothing secret here" {
		t.Errorf("clean text changed: %q", got)
	}
}

func TestScrubberReaderAcrossChunks(t *testing.T) {
	s := NewScrubber(canary)
	var in bytes.Buffer
	for i := 0; i < 5000; i++ {
		in.WriteString("chunk ")
		in.WriteString(forms(canary)[i%len(forms(canary))])
		in.WriteString(" ")
	}
	want := s.String(in.String())
	// One byte at a time and in odd sizes: a secret straddling any boundary is still caught.
	for name, r := range map[string]io.Reader{
		"one byte": iotest.OneByteReader(bytes.NewReader(in.Bytes())),
		"half":     iotest.HalfReader(bytes.NewReader(in.Bytes())),
		"whole":    bytes.NewReader(in.Bytes()),
	} {
		got, err := io.ReadAll(s.Reader(r))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s: streamed result differs from whole-buffer result", name)
		}
		for _, f := range forms(canary) {
			if bytes.Contains(got, []byte(f)) {
				t.Fatalf("%s: %q survived", name, f)
			}
		}
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
