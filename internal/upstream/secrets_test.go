package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/quotedprintable"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// bruteForce is what the automaton must find: the longest match of any
// form at every position, no prefilter.
func bruteForce(forms []*form, b []byte) []byte {
	var spans []span
	for p := range b {
		for _, f := range forms {
			if e := matchForm(f, false, 0, false, b, p); e >= 0 {
				spans = append(spans, span{p, e})
			}
		}
	}
	out, _ := redact(nil, b, 0, len(b), 0, spans)
	return out
}

// heldForms are the ways a test answer carries secret.
func heldForms(secret string) []string {
	var qp bytes.Buffer
	w := quotedprintable.NewWriter(&qp)
	_, _ = w.Write([]byte(strings.Repeat("q", 60) + secret + " tail"))
	_ = w.Close()
	wrap := func(s string, width int, sep string) string {
		var out strings.Builder
		for len(s) > width {
			out.WriteString(s[:width] + sep)
			s = s[width:]
		}
		return out.String() + s
	}
	b64 := base64.StdEncoding.EncodeToString([]byte("user:" + secret))
	return []string{
		secret,
		jsonAllEscaped(secret, true),
		url.QueryEscape(secret),
		percentAll(secret, hexLower),
		b64,
		base64.RawURLEncoding.EncodeToString([]byte("xy" + secret)),
		wrap(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("m", 50)+secret)), 76, "\r\n"),
		wrap(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("m", 40)+secret)), 64, "\n"),
		qp.String(),
		strings.ReplaceAll(qp.String(), "\r\n", "\n"),
		hex.EncodeToString([]byte(secret)),
		utf16Bytes(secret, false),
		utf16Bytes(secret, true),
	}
}

// TestSecretsThousandsHeld: with 2,000 secrets held in one set, answers
// carrying a sample of them in every form come out with none left, through
// Bytes, Reader (random chunks) and Stream (random pieces); the same
// answer without them is untouched.
func TestSecretsThousandsHeld(t *testing.T) {
	all := benchSecrets(2000)
	set := NewSecrets()
	for i := 0; i < len(all); i += 100 {
		// Owners of 100 values each keep the test's rebuilds few.
		set.Set(fmt.Sprintf("owner%d", i), all[i:i+100]...)
	}
	if set.Len() != len(all) {
		t.Fatalf("Len = %d", set.Len())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var body strings.Builder
	sample := []string{}
	for range 40 {
		s := all[rng.IntN(len(all))]
		sample = append(sample, s)
		for _, f := range heldForms(s) {
			body.WriteString("<" + f + ">\n")
		}
	}
	plain := string(benchAnswer(8 << 10))
	body.WriteString(plain)
	// The reference looks only for the sample's forms: the other values are
	// random, and none of their forms occurs.
	want := bruteForce(formsOf(sample...), []byte(body.String()))
	check := func(how string, got []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: differs from the reference at %d", how, firstDiff(got, want))
		}
		for _, s := range sample {
			for _, f := range []string{s, s[:len(s)/2+1]} {
				if bytes.Contains(got, []byte(f)) {
					t.Fatalf("%s: a held secret survived: %q", how, f)
				}
			}
		}
		if !bytes.HasSuffix(got, []byte(plain)) {
			t.Fatalf("%s: the text without secrets was changed", how)
		}
	}
	sc := set.Scrubber()
	check("Bytes", sc.Bytes([]byte(body.String())))
	for range 5 {
		var out bytes.Buffer
		var chunks []string
		for rest := body.String(); len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(3000))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		if _, err := out.ReadFrom(sc.Reader(&chunkReader{chunks: chunks, err: io.EOF})); err != nil {
			t.Fatal(err)
		}
		check("Reader", out.Bytes())
		st := sc.Stream()
		var got []byte
		rest := body.String()
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(900))
			got = st.Append(got, []byte(rest[:n]), n == len(rest))
			rest = rest[n:]
		}
		check("Stream", got)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSecretsChangeWhileScrubbing: sets change while answers are scrubbed
// (run with -race); a value Set before a scrub starts is always redacted,
// and one removed is eventually no longer.
func TestSecretsChangeWhileScrubbing(t *testing.T) {
	set := NewSecrets()
	vals := benchSecrets(200)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(vals); i += 4 {
				set.Set(fmt.Sprintf("s%d", i), vals[i])
				// Set has returned: every scrub from now on redacts it.
				if got := set.Scrubber().String("x " + vals[i] + " y"); got != "x [REDACTED] y" {
					t.Errorf("a value Set before the scrub passed: %q", got)
					return
				}
				if i%3 == 0 {
					set.Remove(fmt.Sprintf("s%d", i))
				}
			}
		}()
	}
	// A stream open across the changes picks them up piece by piece.
	st := set.Scrubber().Stream()
	for i := 0; i < 50; i++ {
		_ = st.Append(nil, []byte("piece "+vals[i%len(vals)]), i == 49)
	}
	wg.Wait()
	set.Set("flush") // a Set covers every change before it, the removals too
	if got := set.Scrubber().String(vals[0]); got != vals[0] {
		t.Fatalf("a removed value is still redacted after the next rebuild: %q", got)
	}
	if got := set.Scrubber().String(vals[1]); got != Redacted {
		t.Fatalf("a held value: %q", got)
	}
}

// FuzzScrub compares the automaton with the brute-force reference on
// inputs made of secret forms, their fragments and noise.
func FuzzScrub(f *testing.F) {
	secrets := []string{"CANARY-fz-0123456789abcdef/+=x", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "s3cr3t k€y \"quoted\""}
	forms := formsOf(secrets...)
	s := NewScrubber(secrets...)
	for _, sec := range secrets {
		for _, v := range heldForms(sec) {
			f.Add([]byte(v), uint16(0), uint8(0))
		}
	}
	f.Add([]byte("%25%2F&#x2f;\\u002F=2F=\r\n\r\n"), uint16(3), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, pick uint8) {
		// Plant a form of a secret inside the fuzzer's bytes.
		sec := secrets[int(pick)%len(secrets)]
		hf := heldForms(sec)
		form := hf[int(pick/3)%len(hf)]
		at := int(cut) % (len(data) + 1)
		in := append(append(append([]byte{}, data[:at]...), form...), data[at:]...)
		want := bruteForce(forms, in)
		if got := s.Bytes(in); !bytes.Equal(got, want) {
			t.Fatalf("input %q:\n got %q\nwant %q", in, got, want)
		}
	})
}
