package upstream

import (
	"bytes"
	"slices"
	"sync"
)

// automaton finds the forms of a set of values in bytes, at a cost per
// byte that does not grow with the number of values. Two stages:
//
//   - A prefilter reads the input as the symbols it stands for: every byte
//     is itself (ASCII-case-folded), and a token (an escape such as %2F or
//     &#47;, a separator such as "=\r\n") may stand for other symbols; where
//     tokens make several readings possible, each is followed (a lattice:
//     the set of states arriving at each position). One Aho-Corasick
//     automaton over every form's core (its first exact symbols) runs over
//     that lattice.
//   - Where a core ends, the whole form is matched exactly (matchForm) at
//     each start that could lead there.
//
// The tokens are exactly the alternatives of the forms' units, so a match
// of a form is always a reading the prefilter follows. An automaton is
// immutable: Secrets swaps in a new one when its set changes.
type automaton struct {
	forms  []*form
	maxLen int // the longest match of any form

	// Tokens: special marks the bytes that begin one; troot is the token
	// trie's node for a first byte (0: none).
	special [256]bool
	troot   [256]int32
	tnodes  []tnode
	maxTok  int

	// The Aho-Corasick automaton over symbol classes (0: in no core).
	cls    [256]uint8 // input byte → class of its folded symbol
	symCls [256]uint8 // symbol → class
	ncls   int32
	row    []int32 // state → its dense row in dense, or -1 (sparse)
	dense  []int32
	estart []int32 // sparse edges of state s: estart[s] to estart[s+1]
	ecls   []uint8
	eto    []int32
	fail   []int32
	out    []int32 // state → first of its outputs in outs, or -1
	outs   []outEntry
	pairs  [1024]uint64 // byte pairs at which a match can begin from the root
}

type tnode struct {
	next  []tedge
	means [][]byte // what the token ending here stands for (empty: a separator)
}

type tedge struct {
	b  byte
	to int32
}

type outEntry struct{ form, next int32 }

// ringSize bounds a token's length (the lattice keeps states this far ahead).
const ringSize = 64

// denseKids is the fan-out from which a state gets a dense row.
const denseKids = 4

func buildAutomaton(forms []*form) *automaton {
	a := &automaton{forms: forms, tnodes: []tnode{{}}}
	for _, f := range forms {
		a.maxLen = max(a.maxLen, f.maxLen)
	}
	a.buildTokens()
	a.buildAC()
	return a
}

// buildTokens puts every alternative that stands for other symbols than its
// own bytes (and its lower-case spelling) in the token trie, and every
// separator.
func (a *automaton) buildTokens() {
	seenUnit := map[*unitDef]bool{}
	seenTok := map[string]bool{}
	add := func(tok, sym []byte) {
		if bytes.Equal(foldBytes(string(tok)), sym) {
			return // read as itself
		}
		if len(tok) >= ringSize {
			panic("scrub: a token longer than the lattice's ring")
		}
		key := string(tok) + "\x00" + string(sym)
		if seenTok[key] {
			return
		}
		seenTok[key] = true
		a.special[tok[0]] = true
		a.maxTok = max(a.maxTok, len(tok))
		n := a.troot[tok[0]]
		if n == 0 {
			n = int32(len(a.tnodes))
			a.tnodes = append(a.tnodes, tnode{})
			a.troot[tok[0]] = n
		}
		for _, c := range tok[1:] {
			next := int32(0)
			for _, e := range a.tnodes[n].next {
				if e.b == c {
					next = e.to
				}
			}
			if next == 0 {
				next = int32(len(a.tnodes))
				a.tnodes = append(a.tnodes, tnode{})
				a.tnodes[n].next = append(a.tnodes[n].next, tedge{c, next})
			}
			n = next
		}
		a.tnodes[n].means = append(a.tnodes[n].means, sym)
	}
	for _, f := range a.forms {
		for _, g := range f.gaps {
			add(g, []byte{})
		}
		for _, u := range f.units {
			if u.sym == nil || seenUnit[u] {
				continue
			}
			seenUnit[u] = true
			for _, alt := range u.alts {
				add(alt, u.sym)
			}
			for _, alt := range u.lower.alts {
				add(alt, u.sym)
			}
		}
	}
}

func (a *automaton) buildAC() {
	// Symbol classes: the symbols of the cores.
	a.ncls = 1
	for _, f := range a.forms {
		for _, c := range f.core {
			if a.symCls[c] == 0 {
				if a.ncls == 255 {
					panic("scrub: more than 254 symbols")
				}
				a.symCls[c] = uint8(a.ncls)
				a.ncls++
			}
		}
	}
	for b := 0; b < 256; b++ {
		a.cls[b] = a.symCls[foldByte(byte(b))]
	}
	// The trie of the cores.
	type kid struct {
		c  uint8
		to int32
	}
	kids := [][]kid{nil}
	own := [][]int32{nil}
	child := func(s int32, c uint8) int32 {
		for _, k := range kids[s] {
			if k.c == c {
				return k.to
			}
		}
		return -1
	}
	for i, f := range a.forms {
		s := int32(0)
		for _, sym := range f.core {
			c := a.symCls[sym]
			t := child(s, c)
			if t < 0 {
				t = int32(len(kids))
				kids = append(kids, nil)
				own = append(own, nil)
				kids[s] = append(kids[s], kid{c, t})
			}
			s = t
		}
		own[s] = append(own[s], int32(i))
	}
	n := len(kids)
	a.fail = make([]int32, n)
	a.out = make([]int32, n)
	a.row = make([]int32, n)
	a.estart = make([]int32, n+1)
	order := make([]int32, 0, n)
	order = append(order, 0)
	a.out[0] = -1
	for _, id := range own[0] {
		a.outs = append(a.outs, outEntry{id, a.out[0]})
		a.out[0] = int32(len(a.outs) - 1)
	}
	for qi := 0; qi < len(order); qi++ {
		u := order[qi]
		for _, k := range kids[u] {
			v := k.to
			if u != 0 {
				f := a.fail[u]
				for {
					if t := child(f, k.c); t >= 0 {
						a.fail[v] = t
						break
					}
					if f == 0 {
						break
					}
					f = a.fail[f]
				}
			}
			a.out[v] = a.out[a.fail[v]]
			for _, id := range own[v] {
				a.outs = append(a.outs, outEntry{id, a.out[v]})
				a.out[v] = int32(len(a.outs) - 1)
			}
			order = append(order, v)
		}
	}
	// Sparse edges, sorted by class.
	for s := 0; s < n; s++ {
		a.estart[s] = int32(len(a.ecls))
		ks := kids[s]
		slices.SortFunc(ks, func(x, y kid) int { return int(x.c) - int(y.c) })
		for _, k := range ks {
			a.ecls = append(a.ecls, k.c)
			a.eto = append(a.eto, k.to)
		}
	}
	a.estart[n] = int32(len(a.ecls))
	// Dense rows, in breadth-first order: a state's row resolves its
	// failure links (those of shallower states are ready).
	for s := range a.row {
		a.row[s] = -1
	}
	for _, s := range order {
		if s != 0 && len(kids[s]) < denseKids {
			continue
		}
		r := int32(len(a.dense))
		a.dense = append(a.dense, make([]int32, a.ncls)...)
		for c := int32(1); c < a.ncls; c++ {
			t := child(s, uint8(c))
			if t < 0 {
				if s == 0 {
					t = 0
				} else {
					t = a.step(a.fail[s], uint8(c))
				}
			}
			a.dense[r+c] = t
		}
		a.row[s] = r
	}
	// Pairs at which a match can begin from the root: a core's first symbol
	// (either case) followed by its second (either case) or by a byte that
	// begins a token.
	setPair := func(b0, b1 byte) {
		k := uint(b0)<<8 | uint(b1)
		a.pairs[k>>6] |= 1 << (k & 63)
	}
	for _, f := range a.forms {
		if len(f.core) == 0 {
			continue
		}
		for b0 := 0; b0 < 256; b0++ {
			if foldByte(byte(b0)) != f.core[0] {
				continue
			}
			for b1 := 0; b1 < 256; b1++ {
				if len(f.core) == 1 || foldByte(byte(b1)) == f.core[1] || a.special[b1] {
					setPair(byte(b0), byte(b1))
				}
			}
		}
	}
}

// tokenAt reports whether a token (other than b[p] read as itself) starts
// at p.
func (a *automaton) tokenAt(b []byte, p int) bool {
	node := a.troot[b[p]]
	for q := p + 1; node != 0; q++ {
		if len(a.tnodes[node].means) > 0 {
			return true
		}
		if q >= len(b) {
			return false
		}
		next := int32(0)
		for _, e := range a.tnodes[node].next {
			if e.b == b[q] {
				next = e.to
				break
			}
		}
		node = next
	}
	return false
}

// step is the state after reading a symbol of class c in state s.
func (a *automaton) step(s int32, c uint8) int32 {
	if c == 0 {
		return 0
	}
	for {
		if r := a.row[s]; r >= 0 {
			return a.dense[r+int32(c)]
		}
		for i := a.estart[s]; i < a.estart[s+1]; i++ {
			if a.ecls[i] == c {
				return a.eto[i]
			}
		}
		s = a.fail[s]
	}
}

// span is a match: b[start:end].
type span struct{ start, end int }

// lattice is the scratch of one scan: the states arriving at the positions
// ahead, and the hits verified.
type lattice struct {
	ring  [ringSize][]int32
	tried []span // (form, end) pairs already verified, as span{form, end}
}

var lattices = sync.Pool{New: func() any { return new(lattice) }}

// find appends to spans the matches that start in [from, safe) of b (lower:
// b is in ASCII lower case and the forms are matched so, for header names).
func (a *automaton) find(b []byte, from, safe int, lower bool, spans []span) []span {
	if len(a.forms) == 0 || from >= safe {
		return spans
	}
	n := len(b)
	var lt *lattice
	s, single := int32(0), true
	furthest := from // the furthest position a state was carried to
	for p := from; p < n; {
		if single {
			for p < n {
				c := b[p]
				if a.special[c] && a.tokenAt(b, p) {
					break
				}
				if s == 0 && p+1 < n {
					if k := uint(c)<<8 | uint(b[p+1]); a.pairs[k>>6]&(1<<(k&63)) == 0 {
						p++
						continue
					}
				}
				s = a.step(s, a.cls[c])
				p++
				if a.out[s] >= 0 {
					if lt == nil {
						lt = lattices.Get().(*lattice)
					}
					spans = a.verify(lt, s, b, p, from, safe, lower, spans)
				}
			}
			if p >= n {
				break
			}
			if lt == nil {
				lt = lattices.Get().(*lattice)
			}
			lt.ring[p%ringSize] = append(lt.ring[p%ringSize][:0], s)
			single = false
			furthest = max(furthest, p)
		}
		slot := p % ringSize
		st := lt.ring[slot]
		if len(st) == 0 {
			st = append(st, 0)
		}
		carry := func(q int, t int32) {
			r := &lt.ring[q%ringSize]
			if !slices.Contains(*r, t) {
				*r = append(*r, t)
			}
			furthest = max(furthest, q)
		}
		c := b[p]
		for _, x := range st {
			y := a.step(x, a.cls[c])
			if a.out[y] >= 0 {
				spans = a.verify(lt, y, b, p+1, from, safe, lower, spans)
			}
			carry(p+1, y)
		}
		if a.special[c] {
			node := a.troot[c]
			for q := p + 1; node != 0; {
				for _, m := range a.tnodes[node].means {
					for _, x := range st {
						y := x
						for _, sym := range m {
							y = a.step(y, a.symCls[sym])
							if a.out[y] >= 0 {
								spans = a.verify(lt, y, b, q, from, safe, lower, spans)
							}
						}
						carry(q, y)
					}
				}
				if q >= n {
					break
				}
				next := int32(0)
				for _, e := range a.tnodes[node].next {
					if e.b == b[q] {
						next = e.to
						break
					}
				}
				node = next
				q++
			}
		}
		lt.ring[slot] = st[:0]
		p++
		if furthest <= p {
			if r := lt.ring[p%ringSize]; len(r) == 1 {
				s, single = r[0], true
				lt.ring[p%ringSize] = r[:0]
			}
		}
	}
	if lt != nil {
		for i := range lt.ring {
			lt.ring[i] = lt.ring[i][:0]
		}
		lt.tried = lt.tried[:0]
		lattices.Put(lt)
	}
	return spans
}

// verify matches exactly, at every start that could lead there, each form
// whose core ends at e in state s.
func (a *automaton) verify(lt *lattice, s int32, b []byte, e, from, safe int, lower bool, spans []span) []span {
	for o := a.out[s]; o >= 0; o = a.outs[o].next {
		id := int(a.outs[o].form)
		if slices.Contains(lt.tried, span{id, e}) {
			continue
		}
		lt.tried = append(lt.tried, span{id, e})
		f := a.forms[id]
		for q := max(from, e-f.before-a.maxTok); q < min(e, safe); q++ {
			if end := matchForm(f, lower, 0, false, b, q); end >= 0 {
				spans = append(spans, span{q, end})
			}
		}
	}
	return spans
}

// scan appends b[from:safe] to dst with every byte that lies inside a match
// replaced: a run of such bytes (overlapping matches merged) becomes one
// Redacted. Matches are looked for at the positions before safe; those
// may extend past it. end is where a redaction carried over from earlier
// input ends (bytes before it are inside it and not written). scan returns
// dst and how many bytes past safe the last redaction covers.
func (a *automaton) scan(dst, b []byte, from, safe, end int) ([]byte, int) {
	spans := a.find(b, from, safe, false, nil)
	return redact(dst, b, from, safe, end, spans)
}

func redact(dst, b []byte, from, safe, end int, spans []span) ([]byte, int) {
	slices.SortFunc(spans, func(x, y span) int {
		if x.start != y.start {
			return x.start - y.start
		}
		return y.end - x.end
	})
	raw := max(from, end)
	for _, sp := range spans {
		if sp.start >= end {
			dst = append(dst, b[raw:sp.start]...)
			dst = append(dst, Redacted...)
		}
		end = max(end, sp.end)
		raw = end
	}
	if raw < safe {
		dst = append(dst, b[raw:safe]...)
	}
	return dst, max(end-safe, 0)
}
