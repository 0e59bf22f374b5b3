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
// concurrent use; changing the set does not stop calls in flight: scrubs
// read an immutable automaton that a change replaces.
type Secrets struct {
	mu     sync.Mutex // guards owners and gen
	owners map[string]owned
	gen    uint64 // changes made

	build sync.Mutex // one rebuild at a time
	built uint64     // the gen the current automaton covers

	cur      atomic.Pointer[automaton]
	scrubber *Scrubber
}

// owned is an owner's values and their forms, compiled once at Set.
type owned struct {
	values []string
	forms  []*form
}

// NewSecrets returns an empty set.
func NewSecrets() *Secrets {
	s := &Secrets{owners: map[string]owned{}}
	s.cur.Store(buildAutomaton(nil))
	s.scrubber = &Scrubber{live: s}
	return s
}

// Set makes values the owner's (replacing what it held before). When Set
// returns, every scrub that starts after it covers them. Sets that overlap
// share one rebuild.
func (s *Secrets) Set(owner string, values ...string) {
	s.mu.Lock()
	if o, ok := s.owners[owner]; ok && slices.Equal(o.values, values) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	forms := formsOf(values...) // outside the lock: the costly part of a Set
	s.mu.Lock()
	s.owners[owner] = owned{values: slices.Clone(values), forms: forms}
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	s.publish(gen)
}

// Remove drops the owner's values. The automaton without them is built in
// the background: a value removed may still be scrubbed for a moment.
func (s *Secrets) Remove(owner string) {
	s.mu.Lock()
	if _, ok := s.owners[owner]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.owners, owner)
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	go s.publish(gen)
}

// publish makes the automaton cover at least change gen: a rebuild of the
// whole set, unless one that started after gen already covered it.
func (s *Secrets) publish(gen uint64) {
	s.build.Lock()
	defer s.build.Unlock()
	if s.built >= gen {
		return
	}
	s.mu.Lock()
	latest := s.gen
	var forms []*form
	for _, o := range s.owners {
		forms = append(forms, o.forms...)
	}
	s.mu.Unlock()
	s.cur.Store(buildAutomaton(forms))
	s.built = latest
}

// Len is how many values the set holds.
func (s *Secrets) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.owners {
		n += len(o.values)
	}
	return n
}

// Scrubber returns the scrubber of the set: it follows later changes.
func (s *Secrets) Scrubber() *Scrubber { return s.scrubber }
