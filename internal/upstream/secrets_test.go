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
	"sync/atomic"
	"testing"
)

const tokenChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// realisticSecret is the i-th of a mix of what issuers mint: GitHub tokens,
// OpenAI-style keys, AWS-like secret keys and random base64url tokens.
func realisticSecret(rng *rand.Rand, i int) string {
	pick := func(n int, set string) string {
		b := make([]byte, n)
		for j := range b {
			b[j] = set[rng.IntN(len(set))]
		}
		return string(b)
	}
	switch i % 4 {
	case 0:
		return "ghp_" + pick(36, tokenChars)
	case 1:
		return "sk-" + pick(48, tokenChars)
	case 2:
		return pick(40, tokenChars+"+/")
	default:
		return pick(43, tokenChars+"-_")
	}
}

// secretForms are the ways the test writes secret into an answer.
func secretForms(secret string) map[string]string {
	qp := func(s string) string {
		var b bytes.Buffer
		w := quotedprintable.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.String()
	}
	out := map[string]string{
		"raw":     secret,
		"json":    jsonString(secret, true),
		"percent": url.QueryEscape(secret),
		"hex":     hex.EncodeToString([]byte(secret)),
		"utf16le": utf16Bytes(secret, false),
		"utf16be": utf16Bytes(secret, true),
		// a soft break falls inside the secret: the prefix fills the line.
		"qp soft break": qp(strings.Repeat("q", 50) + secret),
		"mime base64":   wrap(base64.StdEncoding.EncodeToString([]byte("Subject: hi\r\n\r\n"+secret)), 76, "\r\n"),
		"pem base64":    wrap(base64.StdEncoding.EncodeToString([]byte("x"+secret)), 64, "\n"),
	}
	for k, prefix := range []string{"", "u", "us"} {
		out[fmt.Sprintf("base64 at %d", k)] = base64.RawURLEncoding.EncodeToString([]byte(prefix + secret + "!"))
	}
	return out
}

// With 1,000 secrets held in one Secrets, an answer carrying several of
// them in every form loses them all, whole or streamed.
func TestSecretsManyHeld(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	set := NewSecrets()
	var all []string
	for i := range 1000 {
		v := realisticSecret(rng, i)
		all = append(all, v)
		set.Set(fmt.Sprintf("session-%d", i), v, "Bearer "+v)
	}
	if set.Len() != 2000 {
		t.Fatalf("Len = %d", set.Len())
	}
	s := set.Scrubber()
	for round := range 20 {
		var in strings.Builder
		var carried []string
		in.WriteString(`{"items":[`)
		for j := range 6 {
			v := all[rng.IntN(len(all))]
			carried = append(carried, v)
			for name, f := range secretForms(v) {
				fmt.Fprintf(&in, `{"n":%d,"form":%q,"v":"`, j, name)
				in.WriteString(f)
				in.WriteString(`"},` + "\n")
			}
		}
		in.WriteString(`{"clean": "nothing to see"}]}`)
		whole := s.String(in.String())
		check := func(how, got string) {
			t.Helper()
			for _, v := range carried {
				for name, f := range secretForms(v) {
					if strings.Contains(got, strings.TrimRight(f, "\n")) {
						t.Fatalf("round %d, %s: %s form of a held secret survived", round, how, name)
					}
				}
			}
			if !strings.Contains(got, `{"clean": "nothing to see"}`) {
				t.Fatalf("round %d, %s: clean text went", round, how)
			}
		}
		check("Bytes", whole)
		for name, f := range secretForms(carried[0]) {
			if name == "qp soft break" || strings.Contains(name, "base64") {
				continue // their surroundings are part of what was encoded
			}
			if got := s.String("<" + f + ">"); got != "<"+Redacted+">" {
				t.Fatalf("%s form alone: %q", name, got)
			}
		}
		r, err := io.ReadAll(s.Reader(&chunkReader{chunks: randomPieces(rng, in.String()), err: io.EOF}))
		if err != nil || string(r) != whole {
			t.Fatalf("round %d: Reader in random chunks differs from Bytes (%v)", round, err)
		}
		st := s.Stream()
		var out []byte
		for _, p := range randomPieces(rng, in.String()) {
			out = st.Append(out, []byte(p), false)
		}
		if out = st.Append(out, nil, true); string(out) != whole {
			t.Fatalf("round %d: Stream in random pieces differs from Bytes", round)
		}
	}
}

// Set and Remove while answers are scrubbed: a secret Set before a scrub
// starts is always scrubbed by it, whichever automaton holds it then; a
// stream started earlier scrubs it from the pieces that follow the Set.
func TestSecretsConcurrentChange(t *testing.T) {
	set := NewSecrets()
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		set.Set(fmt.Sprintf("base-%d", i), realisticSecret(rng, i))
	}
	s := set.Scrubber()
	relay := s.Stream() // a WebSocket relay started before the secrets below
	type held struct {
		v     string
		owner string
	}
	var (
		mu      sync.Mutex
		ready   []held // Set has returned for these and they are not yet removed
		removed = map[string]bool{}
		done    atomic.Bool
		wg      sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range 150 {
				owner := fmt.Sprintf("w%d-%d", w, i)
				v := realisticSecret(rng, i)
				set.Set(owner, v)
				mu.Lock()
				ready = append(ready, held{v, owner})
				mu.Unlock()
				if i%3 == 0 {
					mu.Lock()
					k := rng.IntN(len(ready))
					h := ready[k]
					ready = append(ready[:k], ready[k+1:]...)
					removed[h.owner] = true
					mu.Unlock()
					set.Remove(h.owner)
				}
			}
		}()
	}
	var errs atomic.Int32
	var scrubbers sync.WaitGroup
	for range 2 {
		scrubbers.Add(1)
		go func() {
			defer scrubbers.Done()
			for !done.Load() {
				mu.Lock()
				if len(ready) == 0 {
					mu.Unlock()
					continue
				}
				h := ready[len(ready)-1]
				mu.Unlock()
				// h was Set before this scrub starts (it may be removed
				// meanwhile: then scrubbing it is still allowed).
				in := `{"echo":"` + h.v + `","b64":"` + base64.StdEncoding.EncodeToString([]byte(h.v)) + `"}`
				if got := s.String(in); strings.Contains(got, h.v) || strings.Contains(got, base64.StdEncoding.EncodeToString([]byte(h.v))[:20]) {
					mu.Lock()
					if !removed[h.owner] {
						errs.Add(1)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	done.Store(true)
	scrubbers.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d scrubs missed a secret Set before they started", errs.Load())
	}
	mu.Lock()
	last := ready[len(ready)-1].v
	mu.Unlock()
	if got := relay.Append(nil, []byte("frame "+last+" end"), true); string(got) != "frame "+Redacted+" end" {
		t.Fatalf("a stream started before the Set let the secret through: %q", got)
	}
}

// A removed secret goes from the automaton in the end: its memory is freed.
func TestSecretsRemoveFrees(t *testing.T) {
	set := NewSecrets()
	set.Set("a", canaryToken)
	set.Set("b", canary)
	set.Remove("a")
	if set.Len() != 1 {
		t.Fatalf("Len = %d", set.Len())
	}
	set.rebuild()
	if got := set.Scrubber().String(canaryToken); got != canaryToken {
		t.Fatalf("removed secret still scrubbed after a rebuild: %q", got)
	}
	if got := set.Scrubber().String(canary); got != Redacted {
		t.Fatalf("held secret not scrubbed after a rebuild: %q", got)
	}
	// Replacing an owner's values covers the new ones at once.
	set.Set("b", canaryUnicode)
	if got := set.Scrubber().String(canaryUnicode); got != Redacted {
		t.Fatalf("replacement not scrubbed: %q", got)
	}
}
