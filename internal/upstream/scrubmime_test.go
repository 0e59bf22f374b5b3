package upstream

import (
	"bytes"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"mime/quotedprintable"
	"strings"
	"testing"
)

// canaryToken is a secret as issuers mint them, long enough to span MIME lines.
const canaryToken = "ghp_CANARY0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789KLMN"

// wrap breaks s into lines of width characters, each ended by nl, as MIME
// (76) and PEM (64) write base64.
func wrap(s string, width int, nl string) string {
	var b strings.Builder
	for len(s) > width {
		b.WriteString(s[:width] + nl)
		s = s[width:]
	}
	b.WriteString(s + nl)
	return b.String()
}

// wrappedPos is where character j of the unwrapped text is in wrap's output.
func wrappedPos(j, width int, nl string) int { return j + j/width*len(nl) }

// randomPieces splits s at random places.
func randomPieces(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(len(s), 1+rng.IntN(40))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// streamed scrubs in through a Reader fed in random chunks and through a
// Stream fed in random pieces; both must agree with want.
func streamed(t *testing.T, rng *rand.Rand, s *Scrubber, in, want, what string) {
	t.Helper()
	got, err := io.ReadAll(s.Reader(&chunkReader{chunks: randomPieces(rng, in), err: io.EOF}))
	if err != nil || string(got) != want {
		t.Fatalf("%s: Reader in random chunks:\n got %q\nwant %q (%v)", what, got, want, err)
	}
	st := s.Stream()
	var out []byte
	for _, p := range randomPieces(rng, in) {
		out = st.Append(out, []byte(p), false)
	}
	out = st.Append(out, nil, true)
	if string(out) != want {
		t.Fatalf("%s: Stream in random pieces:\n got %q\nwant %q", what, out, want)
	}
}

// Base64 as MIME and PEM write it: lines of 76 or 64 characters, CRLF or LF,
// the secret at every offset from the line breaks (a break between any two
// of its characters, the boundary ones included).
func TestScrubberMIMEBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, secret := range []string{canary, canaryUnicode, canaryToken} {
		s := NewScrubber(secret)
		for _, width := range []int{76, 64} {
			for _, nl := range []string{"\r\n", "\n"} {
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
					for k := 0; k <= 3*width/4+3; k++ {
						prefix := strings.Repeat("p", k)
						e := enc.EncodeToString([]byte(prefix + secret + "-tail of the attachment"))
						w := wrap(e, width, nl)
						first, last := 8*k/6, (8*(k+len(secret))-1)/6
						want := "Content-Transfer-Encoding: base64\r\n\r\n" + w[:wrappedPos(first, width, nl)] + Redacted + w[wrappedPos(last, width, nl)+1:]
						in := "Content-Transfer-Encoding: base64\r\n\r\n" + w
						if got := s.String(in); got != want {
							t.Fatalf("%q width %d nl %q offset %d:\n got %q\nwant %q", secret, width, nl, k, got, want)
						}
						if k%5 == 0 {
							streamed(t, rng, s, in, want, "base64 wrapped")
						}
					}
				}
			}
		}
	}
}

// Quoted-printable as mime/quotedprintable writes it, soft line breaks
// falling at every place inside the secret; with CRLF and LF soft breaks.
func TestScrubberQuotedPrintable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, secret := range []string{canary, canaryUnicode, canaryToken, strings.Repeat("é", 40) + "-CANARY"} {
		s := NewScrubber(secret)
		breaks := 0
		for k := 0; k < 80; k++ {
			prefix := strings.Repeat("q", k)
			const suffix = " and the rest of the message."
			var b bytes.Buffer
			w := quotedprintable.NewWriter(&b)
			if _, err := w.Write([]byte(prefix + secret + suffix)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			for _, nl := range []string{"\r\n", "\n"} {
				in := strings.ReplaceAll(b.String(), "\r\n", nl)
				got := s.String(in)
				dec, err := io.ReadAll(quotedprintable.NewReader(strings.NewReader(got)))
				if err != nil {
					t.Fatalf("%q offset %d: the scrubbed text is no longer quoted-printable: %v\n%q", secret, k, err, got)
				}
				if want := prefix + Redacted + suffix; string(dec) != want {
					t.Fatalf("%q offset %d nl %q:\n in %q\n got %q\n decoded %q\n want %q", secret, k, nl, in, got, dec, want)
				}
				if strings.Contains(got, "=") && strings.Count(in[:len(in)-len(suffix)], "="+nl) > 0 {
					breaks++
				}
				if k%7 == 0 {
					streamed(t, rng, s, in, got, "quoted-printable")
				}
			}
		}
		if breaks == 0 {
			t.Fatalf("%q: no soft break ever fell in the secret", secret)
		}
	}
}

// Text that holds no secret form stays as it is, whatever its line breaks:
// ordinary multi-line text, quoted-printable and base64 of other data.
func TestScrubberMIMELeavesOtherData(t *testing.T) {
	s := NewScrubber(canary, canaryToken)
	var other bytes.Buffer
	for i := range 3000 {
		other.WriteByte(byte(i * 7 % 251))
	}
	var qp bytes.Buffer
	w := quotedprintable.NewWriter(&qp)
	_, _ = w.Write([]byte(strings.Repeat("Dear team, the quarterly report = attached; CANARY-s3cr3t is not in here. ", 20)))
	_ = w.Close()
	for name, in := range map[string]string{
		"multi-line text":          strings.Repeat("line one of the letter,\r\nand = another line\n=\n=\r\n\r\n", 50),
		"base64 of other data, 76": wrap(base64.StdEncoding.EncodeToString(other.Bytes()), 76, "\r\n"),
		"base64 of other data, 64": wrap(base64.StdEncoding.EncodeToString(other.Bytes()), 64, "\n"),
		"quoted-printable":         qp.String(),
	} {
		if got := s.String(in); got != in {
			t.Errorf("%s changed:\n%q", name, got)
		}
	}
}
