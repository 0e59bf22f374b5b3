// Where a proxy's CPU goes: its CPU profile of a measured round, decoded
// (the pprof protobuf, read with protowire: no pprof library) and each
// sample's CPU charged to one stage by the names of the functions on its
// stack.

package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// stage is one part of a call's path, recognized by function names.
type stage struct {
	name  string
	match []string // substrings of a function's full name
	// fallback: a frame is this stage's only when no other stage matches it
	fallback bool
}

// stages, in report order. A sample is charged to the stage of the
// innermost frame of its stack that any stage matches (a malloc or a
// syscall is charged to the code that made it); a stack no stage matches
// is "other". The broker's own packages match last, as the pipeline, so
// the journal or the upstream's transport called from them count as
// theirs.
var stages = []stage{
	{"audit record", []string{"/internal/audit.", "/internal/store/wal.", "boltstore.(*Bolt).WriteAudit", "boltstore.(*Bolt).SyncAudit"}, false},
	{"bbolt apply", []string{"go.etcd.io/bbolt", "/internal/store/boltstore."}, false},
	{"upstream round trip", []string{
		"net/http.(*Transport)", "net/http.(*persistConn)", "net/http.persistConnWriter", "net/http.(*Request).write",
		"net/http.ReadResponse", "net/http.send", "net/http.(*Client)", "net/http.(*transferWriter)",
		"/internal/upstream.", "net/http/httputil.(*ReverseProxy)",
	}, false},
	{"HTTP server", []string{
		"net/http.(*conn)", "net/http.(*response)", "net/http.(*chunkWriter)", "net/http.(*connReader)",
		"net/http.serverHandler", "net/http.(*Server)", "net/http.readRequest", "net/http.(*ServeMux)",
		"github.com/go-chi/", "/internal/httpapi.", "main.serveBareProxy",
	}, false},
	{"grants", []string{"/internal/grants."}, false},
	{"scrubbing", []string{
		"/internal/upstream.(*Scrubber)", "/internal/upstream.(*snapshot)", "/internal/upstream.(*automaton)",
		"/internal/upstream.(*finder)", "/internal/upstream.(*stateSet)", "/internal/upstream.scrub",
	}, false},
	{"broker pipeline", []string{"github.com/airlock-broker/airlock/"}, true},
	{"runtime (GC, scheduler)", []string{
		"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
		"runtime.mcall", "runtime.mstart", "runtime.morestack", "runtime.sysmon",
	}, false},
}

// otherStage names the CPU no stage matched.
const otherStage = "other"

// stageNames lists the report's columns: the stages, then other.
func stageNames() []string {
	out := make([]string, 0, len(stages)+1)
	for _, s := range stages {
		out = append(out, s.name)
	}
	return append(out, otherStage)
}

// classify names the stage of a stack, its function names innermost first.
// Of the stages matching a frame, the longest pattern wins (scrubbing over
// the upstream package it lives in), and a fallback stage only when no
// other matches.
func classify(stack []string) string {
	for _, fn := range stack {
		best, bestLen, fallback := "", 0, ""
		for _, s := range stages {
			for _, m := range s.match {
				switch {
				case !strings.Contains(fn, m):
				case s.fallback:
					fallback = s.name
				case len(m) > bestLen:
					best, bestLen = s.name, len(m)
				}
			}
		}
		if best == "" {
			best = fallback
		}
		if best != "" {
			return best
		}
	}
	return otherStage
}

// stageCPU decodes a CPU profile and sums its CPU time (ns) per stage.
func stageCPU(data []byte) (map[string]int64, error) {
	p, err := decodeProfile(data)
	if err != nil {
		return nil, err
	}
	vi := -1
	for i, t := range p.sampleTypes {
		if t == "cpu" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, errors.New("profile has no cpu samples")
	}
	out := map[string]int64{}
	var stack []string
	for _, s := range p.samples {
		if vi >= len(s.values) {
			continue
		}
		stack = stack[:0]
		for _, id := range s.locations {
			for _, fid := range p.locations[id] {
				stack = append(stack, p.functions[fid])
			}
		}
		out[classify(stack)] += s.values[vi]
	}
	return out, nil
}

// cpuProfile is what stageCPU reads of a pprof profile.
type cpuProfile struct {
	sampleTypes []string
	samples     []sample
	locations   map[uint64][]uint64 // location id → function ids, innermost first
	functions   map[uint64]string   // function id → name
}

type sample struct {
	locations []uint64
	values    []int64
}

// decodeProfile reads the (gzipped) profile.proto of runtime/pprof.
func decodeProfile(data []byte) (*cpuProfile, error) {
	if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
	}
	p := &cpuProfile{locations: map[uint64][]uint64{}, functions: map[uint64]string{}}
	var strs []string
	var typeIdx []uint64
	funcName := map[uint64]uint64{}
	err := fields(data, func(num protowire.Number, v uint64, b []byte) error {
		switch num {
		case 1: // sample_type
			return fields(b, func(n protowire.Number, v uint64, _ []byte) error {
				if n == 1 {
					typeIdx = append(typeIdx, v)
				}
				return nil
			})
		case 2:
			var s sample
			err := fields(b, func(n protowire.Number, v uint64, b []byte) error {
				switch n {
				case 1:
					s.locations = appendVarints(s.locations, v, b)
				case 2:
					for _, x := range appendVarints(nil, v, b) {
						s.values = append(s.values, int64(x))
					}
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4:
			return decodeLocation(b, p.locations)
		case 5:
			var id, name uint64
			err := fields(b, func(n protowire.Number, v uint64, _ []byte) error {
				switch n {
				case 1:
					id = v
				case 2:
					name = v
				}
				return nil
			})
			funcName[id] = name
			return err
		case 6:
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	str := func(i uint64) string {
		if i < uint64(len(strs)) {
			return strs[i]
		}
		return ""
	}
	for _, i := range typeIdx {
		p.sampleTypes = append(p.sampleTypes, str(i))
	}
	for id, n := range funcName {
		p.functions[id] = str(n)
	}
	return p, nil
}

// decodeLocation adds one Location message's function ids (its lines,
// innermost first) to locs.
func decodeLocation(b []byte, locs map[uint64][]uint64) error {
	var id uint64
	var funcs []uint64
	err := fields(b, func(n protowire.Number, v uint64, b []byte) error {
		switch n {
		case 1:
			id = v
		case 4: // Line
			return fields(b, func(n protowire.Number, v uint64, _ []byte) error {
				if n == 1 {
					funcs = append(funcs, v)
				}
				return nil
			})
		}
		return nil
	})
	locs[id] = funcs
	return err
}

// appendVarints appends a repeated varint field's values: one value (v),
// or a packed run (b).
func appendVarints(out []uint64, v uint64, b []byte) []uint64 {
	if b == nil {
		return append(out, v)
	}
	for len(b) > 0 {
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			break
		}
		out = append(out, x)
		b = b[n:]
	}
	return out
}

// fields calls fn for each field of a message: a varint's value, or a
// length-delimited field's bytes (b non-nil). Other wire types are skipped.
func fields(data []byte, fn func(num protowire.Number, v uint64, b []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		var err error
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return protowire.ParseError(m)
			}
			err, n = fn(num, v, nil), m
		case protowire.BytesType:
			b, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if b == nil {
				b = []byte{}
			}
			err, n = fn(num, 0, b), m
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return protowire.ParseError(n)
			}
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
