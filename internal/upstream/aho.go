package upstream

import (
	"bytes"
	"slices"
	"sort"
)

// The matcher has two stages. The automaton (Aho-Corasick) reads the
// input as the symbols it decodes to and reports where the core of a form
// (a run of its exact units, as symbols) may end; only there is the form
// checked, by matchUnits, at each start a window before. So the cost per
// byte does not grow with the number of values held.
//
// Escapes make the decoding ambiguous: "%41" is the symbol 'a' or the
// symbols '%', '4', '1'. The input is therefore a lattice: every byte is a
// token meaning itself (ASCII letters folded to lower case, so hex in
// either case agrees), and every alternative of an exact unit (and its
// lower-cased spelling, for header names) is a token meaning what the unit
// decodes to; a line break that a form may hold is a token meaning
// nothing. The scan keeps the set of automaton states that arrive at each
// position; there is more than one only near a byte that begins a longer
// token.

// tokenTrie holds the tokens other than a byte meaning itself.
type tokenTrie struct {
	first   []int32 // per node: its first child (children are consecutive)
	n       []int32 // per node: how many children
	edge    []byte  // per node: the byte into it
	mLo     []int32 // per node: its meanings, means[mLo:mHi]
	mHi     []int32
	depth   []int32 // per node: the length of its token
	means   [][]byte
	special [256]bool // bytes that begin a token
	maxTok  int
}

func buildTokenTrie(tab []unitEntry) *tokenTrie {
	toks := map[string][][]byte{}
	add := func(tok string, mean []byte) {
		if len(tok) == 1 && len(mean) == 1 && lowerByte(tok[0]) == mean[0] {
			return // the byte itself
		}
		for _, m := range toks[tok] {
			if bytes.Equal(m, mean) {
				return
			}
		}
		toks[tok] = append(toks[tok], mean)
	}
	for _, e := range tab {
		if e.mean == nil {
			continue
		}
		for _, a := range e.alts {
			add(string(a), e.mean)
			add(string(foldBytes(string(a))), e.mean)
		}
	}
	for _, seps := range breakSeps {
		for _, s := range seps {
			add(s, []byte{})
		}
	}
	keys := make([]string, 0, len(toks))
	for k := range toks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tt := &tokenTrie{}
	type item struct{ lo, hi, depth int }
	items := []item{{0, len(keys), 0}}
	tt.edge = append(tt.edge, 0)
	for v := 0; v < len(items); v++ {
		it := items[v]
		k := it.lo
		tt.mLo = append(tt.mLo, int32(len(tt.means)))
		tt.depth = append(tt.depth, int32(it.depth))
		for k < it.hi && len(keys[k]) == it.depth {
			tt.means = append(tt.means, toks[keys[k]]...)
			tt.maxTok = max(tt.maxTok, it.depth)
			k++
		}
		tt.mHi = append(tt.mHi, int32(len(tt.means)))
		tt.first = append(tt.first, int32(len(items)))
		for k < it.hi {
			c := keys[k][it.depth]
			j := k
			for j < it.hi && keys[j][it.depth] == c {
				j++
			}
			items = append(items, item{k, j, it.depth + 1})
			tt.edge = append(tt.edge, c)
			if v == 0 {
				tt.special[c] = true
			}
			k = j
		}
		tt.n = append(tt.n, int32(len(items))-tt.first[v])
	}
	return tt
}

// child is the node below v along c, or -1.
func (tt *tokenTrie) child(v int32, c byte) int32 {
	for j := tt.first[v]; j < tt.first[v]+tt.n[v]; j++ {
		if tt.edge[j] == c {
			return j
		}
	}
	return -1
}

// acNode is a state of the automaton: a prefix of some cores.
type acNode struct {
	first, n     int32 // children: nodes first .. first+n-1
	fail         int32
	row          int32 // offset of its dense row in rows, or -1
	outLo, outHi int32 // forms whose core ends here: outs[outLo:outHi]
	dict         int32 // the longest proper suffix with outputs, or -1
	out          bool  // a core ends here or at a suffix
}

// automaton finds the forms of a set of values.
type automaton struct {
	tab     []unitEntry
	tok     *tokenTrie
	forms   []form
	cls     [256]uint8 // the class of a byte's symbol (0: in no core)
	ncls    int
	skip    [256]bool // at the root with nothing pending, the byte changes nothing
	nodes   []acNode
	sym     []uint8 // per node: the class of the edge into it
	rows    []int32
	enc     []int32 // per node: its state
	rowNode []int32 // per dense row: its node
	outs    []int32
	maxLen  int
}

// denseFanout is how many children make a state's transitions a full row.
const denseFanout = 3

func buildAutomaton(t *unitTable, fs []form) *automaton {
	tab, tok := t.view()
	a := &automaton{tab: tab, tok: tok, forms: fs}
	cores := a.classify(fs)
	items := a.trie(cores)
	a.link(items)
	a.encode()
	return a
}

// acCore is a form's core as symbols (classes, once classify ran).
type acCore struct {
	sym  []byte
	form int32
}

// classify gives every byte a core uses a class of its own (0 for the
// rest; ASCII case folded), and returns the cores as classes, sorted.
func (a *automaton) classify(fs []form) []acCore {
	cores := make([]acCore, 0, len(fs))
	var used [256]bool
	for i, f := range fs {
		a.maxLen = max(a.maxLen, int(f.maxLen))
		var s []byte
		for _, id := range f.units[f.core0:f.core1] {
			s = append(s, a.tab[id].mean...)
		}
		for _, c := range s {
			used[c] = true
		}
		cores = append(cores, acCore{s, int32(i)})
	}
	a.ncls = 1
	for c := range 256 {
		if used[c] {
			a.cls[c] = uint8(a.ncls)
			a.ncls++
		}
	}
	for c := range 256 {
		a.cls[c] = a.cls[lowerByte(byte(c))]
	}
	for i := range cores {
		for j, c := range cores[i].sym {
			cores[i].sym[j] = a.cls[c]
		}
	}
	slices.SortFunc(cores, func(x, y acCore) int { return bytes.Compare(x.sym, y.sym) })
	a.outs = make([]int32, len(cores))
	for i, c := range cores {
		a.outs[i] = c.form
	}
	return cores
}

// acItem is a trie node while it is built: the cores below it
// (cores[lo:hi]), its depth and its parent.
type acItem struct{ lo, hi, depth, parent int32 }

// trie builds the trie of the sorted cores, breadth first: a node's
// children are consecutive.
func (a *automaton) trie(cores []acCore) []acItem {
	items := []acItem{{0, int32(len(cores)), 0, -1}}
	a.sym = append(a.sym, 0)
	for v := 0; v < len(items); v++ {
		it := items[v]
		k := it.lo
		for k < it.hi && int32(len(cores[k].sym)) == it.depth {
			k++
		}
		nd := acNode{first: int32(len(items)), outLo: it.lo, outHi: k, dict: -1, row: -1}
		for k < it.hi {
			c := cores[k].sym[it.depth]
			j := k
			for j < it.hi && cores[j].sym[it.depth] == c {
				j++
			}
			items = append(items, acItem{k, j, it.depth + 1, int32(v)})
			a.sym = append(a.sym, c)
			k = j
		}
		nd.n = int32(len(items)) - nd.first
		a.nodes = append(a.nodes, nd)
	}
	return items
}

// link sets fail links, outputs and dense rows, in the same order: every
// state a link leads to is shallower, so already done.
func (a *automaton) link(items []acItem) {
	for v := range a.nodes {
		nd := &a.nodes[v]
		if p := items[v].parent; p > 0 {
			nd.fail = a.nextNode(a.nodes[p].fail, a.sym[v])
		}
		if v > 0 {
			f := &a.nodes[nd.fail]
			if f.outHi > f.outLo {
				nd.dict = nd.fail
			} else {
				nd.dict = f.dict
			}
		}
		nd.out = nd.outHi > nd.outLo || nd.dict >= 0
		if v == 0 || items[v].depth <= 1 || nd.n >= denseFanout {
			row := make([]int32, a.ncls)
			for c := range row {
				if v != 0 {
					row[c] = a.nextNode(nd.fail, uint8(c))
				}
			}
			for j := nd.first; j < nd.first+nd.n; j++ {
				row[a.sym[j]] = j
			}
			nd.row = int32(len(a.rows))
			a.rows = append(a.rows, row...)
		}
	}
}

// encode turns nodes into encoded states (see next) in the rows, and
// marks the bytes the root skips.
func (a *automaton) encode() {
	a.enc = make([]int32, len(a.nodes))
	for v, nd := range a.nodes {
		if nd.row >= 0 {
			a.enc[v] = nd.row << 2
			a.rowNode = append(a.rowNode, int32(v))
		} else {
			a.enc[v] = int32(v)<<2 | 1
		}
		if nd.out {
			a.enc[v] |= 2
		}
	}
	for i, v := range a.rows {
		a.rows[i] = a.enc[v]
	}
	for c := range 256 {
		a.skip[c] = !a.tok.special[c] && a.rows[a.cls[c]] == 0
	}
}

// A state is encoded in an int32: bit 1 is set when a core ends there (or
// at a suffix); with bit 0 clear the rest is the offset of its dense row,
// with bit 0 set its node. The root is 0.

// next is the state after st reads a symbol of class c.
func (a *automaton) next(st int32, c uint8) int32 {
	if st&1 == 0 {
		return a.rows[st>>2+int32(c)]
	}
	for s := st >> 2; ; {
		nd := &a.nodes[s]
		if nd.row >= 0 {
			return a.rows[nd.row+int32(c)]
		}
		for j := nd.first; j < nd.first+nd.n; j++ {
			if a.sym[j] == c {
				return a.enc[j]
			}
		}
		s = nd.fail
	}
}

// node is the node of state st.
func (a *automaton) node(st int32) int32 {
	if st&1 == 0 {
		return a.rowNode[st>>2/int32(a.ncls)]
	}
	return st >> 2
}

// nextNode is the node after node s reads a symbol of class c, while the
// rows hold nodes (during the build).
func (a *automaton) nextNode(s int32, c uint8) int32 {
	for {
		nd := &a.nodes[s]
		if nd.row >= 0 {
			return a.rows[nd.row+int32(c)]
		}
		for j := nd.first; j < nd.first+nd.n; j++ {
			if a.sym[j] == c {
				return j
			}
		}
		s = nd.fail
	}
}

// ringSize bounds the longest token (positions ahead that hold states).
const ringSize = 32

// stateSet is the states arriving at one position.
type stateSet struct {
	n    int
	st   [6]int32
	more []int32 // beyond st, rarely needed
}

func (ss *stateSet) add(s int32) bool {
	for i := 0; i < ss.n && i < len(ss.st); i++ {
		if ss.st[i] == s {
			return false
		}
	}
	if ss.n < len(ss.st) {
		ss.st[ss.n] = s
		ss.n++
		return true
	}
	if slices.Contains(ss.more, s) {
		return false
	}
	ss.more = append(ss.more, s)
	ss.n++
	return true
}

func (ss *stateSet) get(i int) int32 {
	if i < len(ss.st) {
		return ss.st[i]
	}
	return ss.more[i-len(ss.st)]
}

// finder is one scan's state.
type finder struct {
	a        *automaton
	b        []byte
	safe     int
	fold     bool
	lastForm int32 // the form verified last and where that stopped
	lastHi   int
}

// find appends to ms every match of a form that starts before safe.
func (a *automaton) find(ms []span, b []byte, safe int, fold bool) []span {
	if len(a.forms) == 0 || len(b) == 0 {
		return ms
	}
	if a.tok.maxTok >= ringSize {
		panic("upstream: a token longer than the scan's ring")
	}
	f := finder{a: a, b: b, safe: safe, fold: fold, lastForm: -1}
	var ring [ringSize]stateSet
	pend := 0 // positions ahead holding states
	n := len(b)
	s := int32(0)
	single := true
	tt := a.tok
	var one stateSet
	for i := 0; i < n; {
		var cur *stateSet
		if single {
			for i < n {
				if s == 0 {
					for i < n && a.skip[b[i]] {
						i++
					}
					if i == n {
						break
					}
				}
				c := b[i]
				if tt.special[c] {
					break
				}
				s = a.next(s, a.cls[c])
				i++
				if s&2 != 0 {
					ms = f.hit(ms, s, i)
				}
			}
			if i >= n {
				break
			}
			one.n, one.st[0] = 1, s
			cur = &one
		} else {
			cur = &ring[i%ringSize]
		}
		// The tokens starting at i.
		var toks [ringSize]int32
		nt := 0
		for v, j := int32(0), i; j < n; j++ {
			if v = tt.child(v, b[j]); v < 0 {
				break
			}
			if tt.mHi[v] > tt.mLo[v] {
				toks[nt] = v
				nt++
			}
		}
		ident := a.cls[b[i]]
		for k := 0; k < cur.n; k++ {
			st := cur.get(k)
			t := a.next(st, ident)
			if t&2 != 0 {
				ms = f.hit(ms, t, i+1)
			}
			if ring[(i+1)%ringSize].add(t) && ring[(i+1)%ringSize].n == 1 {
				pend++
			}
			for _, v := range toks[:nt] {
				end := i + int(tt.depth[v])
				for _, m := range tt.means[tt.mLo[v]:tt.mHi[v]] {
					t := st
					for _, c := range m {
						t = a.next(t, a.cls[c])
						if t&2 != 0 {
							ms = f.hit(ms, t, end)
						}
					}
					if ring[end%ringSize].add(t) && ring[end%ringSize].n == 1 {
						pend++
					}
				}
			}
		}
		if !single {
			ring[i%ringSize] = stateSet{}
			pend--
		}
		i++
		next := &ring[i%ringSize]
		if pend == 1 && next.n == 1 {
			s, single = next.st[0], true
			*next = stateSet{}
			pend = 0
		} else {
			single = false
		}
	}
	return ms
}

// hit verifies the forms whose core ends at state s (or a suffix of it),
// the core ending at end.
func (f *finder) hit(ms []span, s int32, end int) []span {
	a := f.a
	for u := a.node(s); u >= 0; u = a.nodes[u].dict {
		nd := &a.nodes[u]
		for _, fi := range a.outs[nd.outLo:nd.outHi] {
			ms = f.verify(ms, fi, end)
		}
	}
	return ms
}

func (f *finder) verify(ms []span, fi int32, end int) []span {
	fm := &f.a.forms[fi]
	lo := max(0, end-int(fm.win)-f.a.tok.maxTok)
	hi := min(end, f.safe)
	if fi == f.lastForm && lo < f.lastHi {
		lo = f.lastHi
	}
	if lo >= hi {
		return ms
	}
	f.lastForm, f.lastHi = fi, hi
	seps := breakSeps[fm.brk]
	for p := lo; p < hi; p++ {
		if e := matchUnits(f.a.tab, fm.units, seps, f.fold, f.b, p); e >= 0 {
			if k := len(ms) - 1; k >= 0 && ms[k].start == p {
				ms[k].end = max(ms[k].end, e)
				continue
			}
			ms = append(ms, span{p, e})
		}
	}
	return ms
}
