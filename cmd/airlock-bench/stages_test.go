package main

import (
	"bytes"
	"runtime/pprof"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		name  string
		stack []string // innermost first
		want  string
	}{
		{"journal write", []string{"internal/runtime/syscall/linux.Syscall6", "os.(*File).Write", "github.com/airlock-broker/airlock/internal/store/wal.(*journal).append", "github.com/airlock-broker/airlock/internal/audit.(*Writer).commit", "github.com/airlock-broker/airlock/internal/broker.(*Broker).Call"}, "audit record"},
		{"bbolt apply", []string{"runtime.memmove", "go.etcd.io/bbolt.(*node).put", "github.com/airlock-broker/airlock/internal/store/boltstore.(*Bolt).applyEntries", "github.com/airlock-broker/airlock/internal/store/wal.(*Log).applier"}, "bbolt apply"},
		{"scrub beats its package", []string{"github.com/airlock-broker/airlock/internal/upstream.(*automaton).find", "github.com/airlock-broker/airlock/internal/upstream.(*Scrubber).Bytes", "github.com/airlock-broker/airlock/internal/upstream.(*Client).Do"}, "scrubbing"},
		{"transport under the broker", []string{"net/http.(*Transport).roundTrip", "github.com/airlock-broker/airlock/internal/upstream.(*Client).Do", "github.com/airlock-broker/airlock/internal/broker.(*Broker).Call"}, "upstream round trip"},
		{"pipeline is a fallback", []string{"context.WithCancel", "github.com/airlock-broker/airlock/internal/broker.(*Broker).bound", "github.com/airlock-broker/airlock/internal/httpapi.(*Server).proxy", "net/http.(*conn).serve"}, "broker pipeline"},
		{"handler", []string{"runtime.mallocgc", "github.com/airlock-broker/airlock/internal/httpapi.(*outcomeWriter).answer", "net/http.(*conn).serve"}, "HTTP server"},
		{"scheduler", []string{"runtime.futex", "runtime.findRunnable", "runtime.schedule", "runtime.park_m", "runtime.mcall"}, "runtime (GC, scheduler)"},
		{"GC assist charged to GC", []string{"runtime.scanobject", "runtime.gcAssistAlloc", "runtime.mallocgc", "github.com/airlock-broker/airlock/internal/grants.Evaluate"}, "runtime (GC, scheduler)"},
		{"nothing known", []string{"runtime.goexit"}, "other"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.stack); got != tt.want {
				t.Errorf("classify = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStageCPUDecodesRuntimeProfile reads a profile runtime/pprof wrote.
func TestStageCPUDecodesRuntimeProfile(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skip("CPU profiling in use:", err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i * i
	}
	pprof.StopCPUProfile()
	p, err := decodeProfile(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.sampleTypes) != 2 || p.sampleTypes[1] != "cpu" {
		t.Fatalf("sample types %q, want [samples cpu] (x=%d)", p.sampleTypes, x)
	}
	for _, s := range p.samples {
		if len(s.values) != 2 || len(s.locations) == 0 {
			t.Fatalf("sample %+v: want 2 values and a stack", s)
		}
		for _, id := range s.locations {
			if _, ok := p.locations[id]; !ok {
				t.Fatalf("sample names location %d, not in the profile", id)
			}
		}
	}
	if _, err := stageCPU(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}
