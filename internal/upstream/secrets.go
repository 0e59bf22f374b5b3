package upstream

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Secrets is every secret the broker holds (each upstream's static
// credential, each live session's minted values, values rotated out within
// their grace), each set under an owner. Its Scrubber removes all of them
// from an answer, whichever call's answer it is: an upstream that echoes
// another session's token must not hand it to this one. Safe for
// concurrent use; changing the set does not stop calls in flight.
type Secrets struct {
	mu     sync.Mutex
	owners map[string][]string
	cur    atomic.Pointer[Scrubber]
}

// NewSecrets returns an empty set.
func NewSecrets() *Secrets {
	s := &Secrets{owners: map[string][]string{}}
	s.cur.Store(NewScrubber())
	return s
}

// Set makes values the owner's (replacing what it held before). When Set
// returns, every scrub that starts after it covers them.
func (s *Secrets) Set(owner string, values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(s.owners[owner], values) {
		return
	}
	s.owners[owner] = slices.Clone(values)
	s.rebuild()
}

// Remove drops the owner's values.
func (s *Secrets) Remove(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.owners[owner]; !ok {
		return
	}
	delete(s.owners, owner)
	s.rebuild()
}

// Len is how many values the set holds.
func (s *Secrets) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.owners {
		n += len(v)
	}
	return n
}

// Scrubber returns the scrubber of every value in the set.
func (s *Secrets) Scrubber() *Scrubber { return s.cur.Load() }

func (s *Secrets) rebuild() {
	var all []string
	for _, v := range s.owners {
		all = append(all, v...)
	}
	s.cur.Store(NewScrubber(all...))
}
