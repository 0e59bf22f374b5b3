package upstream

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Secrets is every secret the broker holds (each upstream's static
// credential, each live session's minted values, values rotated out within
// their grace), each set under an owner. Its Scrubber removes all of them
// from an answer, whichever call's answer it is: an upstream that echoes
// another session's token must not hand it to this one. Safe for
// concurrent use; changing the set does not stop calls in flight.
//
// Scans read an immutable snapshot (readers never lock): a large automaton
// over the set as it was at its last rebuild, and a small one over the
// owners changed since. Set compiles the owner's forms once, rebuilds only
// the small automaton and swaps the snapshot; concurrent Sets share one
// rebuild. The large one is rebuilt in the background when the changes
// grow or after rebuildDelay. A removed or replaced value stays in the
// large automaton, and so is still scrubbed, until then.
type Secrets struct {
	units *unitTable

	mu      sync.Mutex // guards the fields below it up to build
	owners  map[string]*owned
	gen     uint64 // counts changes
	stale   int    // values removed or replaced that the large automaton still holds
	changed int    // values set since the large automaton's generation
	total   int
	baseGen uint64    // the generation the large automaton holds
	pending bool      // a background rebuild is running or scheduled
	idle    sync.Cond // signalled when pending ends (L: mu)
	// While a rebuild runs, values it holds that are removed meanwhile
	// (owners of generation rebuildGen or older) will be stale in it.
	rebuildGen uint64
	staleNext  int

	build sync.Mutex // one snapshot build at a time
	built uint64     // the generation the current snapshot holds (under build)
	base  *automaton // under build

	cur  atomic.Pointer[snapshot]
	live *Scrubber
}

// owned is one owner's values and their compiled forms.
type owned struct {
	values []string
	forms  []form
	gen    uint64
}

const (
	// deltaValues is how many changed values make the large automaton be
	// rebuilt at once (the small one is rebuilt on each Set).
	deltaValues = 64
	// rebuildDelay bounds how long a change waits for the large rebuild.
	rebuildDelay = 2 * time.Second
)

// NewSecrets returns an empty set.
func NewSecrets() *Secrets {
	s := &Secrets{units: newUnitTable(), owners: map[string]*owned{}}
	s.idle.L = &s.mu
	s.cur.Store(&snapshot{})
	s.live = &Scrubber{live: &s.cur}
	return s
}

// Set makes values the owner's (replacing what it held before). When Set
// returns, every scrub that starts after it covers them.
func (s *Secrets) Set(owner string, values ...string) {
	s.mu.Lock()
	if o := s.owners[owner]; o != nil && slices.Equal(o.values, values) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	var fs []form
	seen := map[string]bool{}
	for _, v := range values {
		if v != "" && !seen[v] {
			seen[v] = true
			fs = append(fs, s.units.forms(v)...)
		}
	}
	s.mu.Lock()
	if old := s.owners[owner]; old != nil {
		s.drop(old)
	}
	s.gen++
	s.owners[owner] = &owned{values: slices.Clone(values), forms: fs, gen: s.gen}
	s.changed += len(values)
	s.total += len(values)
	g := s.gen
	s.mu.Unlock()
	s.publish(g)
}

// drop accounts for o leaving the set. s.mu is held.
func (s *Secrets) drop(o *owned) {
	s.total -= len(o.values)
	if o.gen <= s.rebuildGen {
		s.staleNext += len(o.values)
	}
	if o.gen <= s.baseGen {
		s.stale += len(o.values)
	} else {
		s.changed -= len(o.values)
	}
}

// Remove drops the owner's values. They may still be scrubbed for a while
// (until the next rebuild of the large automaton).
func (s *Secrets) Remove(owner string) {
	s.mu.Lock()
	o := s.owners[owner]
	if o == nil {
		s.mu.Unlock()
		return
	}
	s.drop(o)
	delete(s.owners, owner)
	s.gen++
	g, inDelta := s.gen, o.gen > s.baseGen
	s.mu.Unlock()
	if inDelta {
		s.publish(g) // the small automaton no longer needs it
	} else {
		s.schedule(false)
	}
}

// waitIdle returns once no background rebuild is running or scheduled.
func (s *Secrets) waitIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pending {
		s.idle.Wait()
	}
}

// Len is how many values the set holds.
func (s *Secrets) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Scrubber returns a scrubber that follows the set: each scrub (and each
// chunk of a Reader, each piece of a Stream) uses the set as it is then.
func (s *Secrets) Scrubber() *Scrubber { return s.live }

// publish makes the snapshot hold generation g at least. A caller that
// finds its change already built by another returns at once (group commit).
func (s *Secrets) publish(g uint64) {
	s.build.Lock()
	defer s.build.Unlock()
	if s.built >= g {
		return
	}
	s.mu.Lock()
	now := s.gen
	var fs []form
	for _, o := range s.owners {
		if o.gen > s.baseGen {
			fs = append(fs, o.forms...)
		}
	}
	big := s.changed >= deltaValues || s.stale >= max(deltaValues, s.total/4)
	s.mu.Unlock()
	sn := &snapshot{}
	sn.add(s.base)
	if len(fs) > 0 {
		sn.add(buildAutomaton(s.units, fs))
	}
	s.cur.Store(sn)
	s.built = now
	s.schedule(big)
}

// schedule starts the large rebuild now or after rebuildDelay, unless one
// is already running or waiting.
func (s *Secrets) schedule(now bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending || s.changed == 0 && s.stale == 0 {
		return
	}
	s.pending = true
	if now || s.stale >= max(deltaValues, s.total/4) {
		go s.rebuild()
		return
	}
	time.AfterFunc(rebuildDelay, s.rebuild)
}

// rebuild builds the large automaton over the whole set, then the
// snapshot.
func (s *Secrets) rebuild() {
	s.mu.Lock()
	g := s.gen
	s.rebuildGen, s.staleNext = g, 0
	var fs []form
	for _, o := range s.owners {
		fs = append(fs, o.forms...)
	}
	s.mu.Unlock()
	var base *automaton
	if len(fs) > 0 {
		base = buildAutomaton(s.units, fs)
	}
	s.build.Lock()
	s.mu.Lock()
	s.base, s.baseGen = base, g
	s.stale, s.changed = s.staleNext, 0
	s.rebuildGen, s.staleNext = 0, 0
	var delta []form
	for _, o := range s.owners {
		if o.gen > g {
			delta = append(delta, o.forms...)
			s.changed += len(o.values)
		}
	}
	now := s.gen
	s.pending = false
	s.idle.Broadcast()
	s.mu.Unlock()
	sn := &snapshot{}
	sn.add(base)
	if len(delta) > 0 {
		sn.add(buildAutomaton(s.units, delta))
	}
	s.cur.Store(sn)
	s.built = now
	s.build.Unlock()
	s.schedule(false)
}
