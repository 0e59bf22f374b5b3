package upstream

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// benchSecrets are n credential-shaped values: GitHub, OpenAI-style and
// AWS-style keys and random URL-safe tokens, in turn.
func benchSecrets(n int) []string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	rnd := func(k int, alphabet string) string {
		b := make([]byte, k)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		return string(b)
	}
	out := make([]string, n)
	for i := range out {
		switch i % 4 {
		case 0:
			out[i] = "ghp_" + rnd(36, alnum)
		case 1:
			out[i] = "sk-" + rnd(48, alnum)
		case 2:
			out[i] = rnd(40, alnum+"/+")
		default:
			b := make([]byte, 24)
			_, _ = rand.Read(b)
			out[i] = base64.RawURLEncoding.EncodeToString(b)
		}
	}
	return out
}

// benchAnswer is a JSON answer of about size bytes, without secrets.
func benchAnswer(size int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `{"id": %d, "name": "widget-%d", "tags": ["a", "b"], "url": "https://api.example.com/v1/items/%d?page=2&sort=asc", "note": "It's \"quoted\" & <escaped> text\n"},`, 10000+i, i, i)
	}
	return b.Bytes()[:size]
}

// BenchmarkScrub is the cost of scrubbing one answer (4 KB, 1 MB) with 1,
// 100 and 10,000 secrets held: without any secret in it, and with one.
func BenchmarkScrub(b *testing.B) {
	for _, held := range []int{1, 100, 10000} {
		secrets := benchSecrets(held)
		s := NewScrubber(secrets...)
		for _, size := range []int{4 << 10, 1 << 20} {
			clean := benchAnswer(size)
			dirty := append(append(append([]byte{}, clean[:size/2]...), `"token": "`+secrets[held/2]+`"`...), clean[size/2:]...)
			for _, c := range []struct {
				name string
				body []byte
			}{{"clean", clean}, {"secret", dirty}} {
				b.Run(fmt.Sprintf("%dKB/held=%d/%s", size>>10, held, c.name), func(b *testing.B) {
					b.SetBytes(int64(len(c.body)))
					b.ReportAllocs()
					for b.Loop() {
						s.Bytes(c.body)
					}
				})
			}
		}
	}
}

// BenchmarkSecretsSet is the cost of adding one owner's secret to a set
// holding 1, 100 or 10,000, and of removing it (Remove returns at once;
// the rebuild it starts is measured as part of the next Set).
func BenchmarkSecretsSet(b *testing.B) {
	for _, held := range []int{1, 100, 10000} {
		set := NewSecrets()
		set.mu.Lock()
		for i, v := range benchSecrets(held) {
			set.owners[fmt.Sprintf("o%d", i)] = owned{values: []string{v}, forms: formsOf(v)}
		}
		set.gen++
		set.mu.Unlock()
		set.publish(set.gen)
		extra := benchSecrets(1)[0]
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				set.Set("bench", extra+strings.Repeat("x", i%7))
				set.Remove("bench")
			}
		})
	}
}

// TestScrubMemoryPerSecret reports the heap one held secret costs.
func TestScrubMemoryPerSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("measures a 10,000-secret automaton")
	}
	secrets := benchSecrets(10000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewScrubber(secrets...)
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("10,000 secrets: %.0f bytes of heap per secret, %d states", float64(after.HeapAlloc-before.HeapAlloc)/10000, len(s.fixed.fail))
	runtime.KeepAlive(s)
}
