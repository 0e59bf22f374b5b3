package upstream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// jsonAnswer is a realistic JSON answer of about size bytes, without a
// secret.
func jsonAnswer(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"total_count":1234,"items":[`)
	for i := 0; b.Len() < size-200; i++ {
		fmt.Fprintf(&b, `{"id":%d,"node_id":"MDEwOlJlcG9zaXRvcnk%d","name":"widget-%d","full_name":"octo/widget-%d",`+
			`"html_url":"https://github.com/octo/widget-%d","description":"A widget \"that\" works & ships",`+
			`"created_at":"2024-05-%02dT10:00:00Z","stargazers_count":%d,"topics":["go","api"]},`, 1700000000+i, i, i, i, i, i%28+1, i*7)
	}
	b.WriteString(`{}]}`)
	return b.Bytes()
}

func heldSecrets(n int) (*Secrets, []string) {
	rng := rand.New(rand.NewPCG(11, 12))
	set := NewSecrets()
	var vs []string
	set.mu.Lock()
	for i := range n {
		v := realisticSecret(rng, i)
		vs = append(vs, v)
		set.gen++
		set.owners[fmt.Sprintf("s%d", i)] = &owned{values: []string{v}, forms: set.units.forms(v), gen: set.gen}
		set.total++
	}
	set.mu.Unlock()
	set.rebuild() // the steady state: one automaton
	return set, vs
}

// BenchmarkSecretsRebuild is the cost of rebuilding the large automaton
// over n secrets (in the background after changes).
func BenchmarkSecretsRebuild(b *testing.B) {
	for _, held := range []int{100, 10000} {
		set, _ := heldSecrets(held)
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			for b.Loop() {
				set.rebuild()
			}
		})
	}
}

func BenchmarkScrub(b *testing.B) {
	for _, held := range []int{1, 100, 10000} {
		set, vs := heldSecrets(held)
		s := set.Scrubber()
		for _, size := range []int{4 << 10, 1 << 20} {
			clean := jsonAnswer(size)
			with := bytes.Replace(clean, []byte("widget-3,"), []byte(vs[len(vs)/2]+","), 1)
			for _, tc := range []struct {
				name string
				body []byte
			}{{"clean", clean}, {"secret", with}} {
				b.Run(fmt.Sprintf("size=%s/held=%d/%s", map[int]string{4 << 10: "4KB", 1 << 20: "1MB"}[size], held, tc.name), func(b *testing.B) {
					b.SetBytes(int64(len(tc.body)))
					b.ReportAllocs()
					for b.Loop() {
						s.Bytes(tc.body)
					}
				})
			}
		}
	}
}

// BenchmarkSecretsSet is the cost of a session minting a secret (Set) and
// of it ending (Remove) with n secrets held, background rebuilds included
// in what the machine does meanwhile. heap-B/secret is what a held secret
// costs in memory.
func BenchmarkSecretsSet(b *testing.B) {
	for _, held := range []int{1, 100, 10000} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		set, _ := heldSecrets(held)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perSecret := float64(after.HeapAlloc-before.HeapAlloc) / float64(held)
		rng := rand.New(rand.NewPCG(13, 14))
		b.Run(fmt.Sprintf("held=%d/add", held), func(b *testing.B) {
			i := 0
			for b.Loop() {
				set.Set(fmt.Sprintf("new%d", i%16), realisticSecret(rng, i))
				i++
			}
			b.ReportMetric(perSecret, "heap-B/secret")
		})
		set.waitIdle()
		b.Run(fmt.Sprintf("held=%d/remove", held), func(b *testing.B) {
			i := 0
			for b.Loop() {
				b.StopTimer()
				owner := "gone" + strings.Repeat("x", i%3)
				set.Set(owner, realisticSecret(rng, i))
				b.StartTimer()
				set.Remove(owner)
				i++
			}
		})
		runtime.KeepAlive(set)
	}
}
