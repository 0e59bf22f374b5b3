package clock

import (
	"sync"
	"testing"
	"time"
)

// Alarms fire at their deadline on the clock, once per key (a later Set
// replaces the alarm), never after Stop or Close.
func TestAlarms(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := NewFake(t0)
	var mu sync.Mutex
	var fired []string
	a := NewAlarms(c, func(key string) { mu.Lock(); fired = append(fired, key); mu.Unlock() })
	got := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), fired...) }

	a.Set("a", t0.Add(time.Minute))
	a.Set("b", t0.Add(2*time.Minute))
	a.Set("b", t0.Add(3*time.Minute)) // replaces b's first alarm
	a.Set("c", t0.Add(time.Minute))
	a.Stop("c")
	if !a.Armed("a") || !a.Armed("b") || a.Armed("c") {
		t.Fatalf("armed: a %v b %v c %v", a.Armed("a"), a.Armed("b"), a.Armed("c"))
	}
	c.Advance(time.Minute)
	if f := got(); len(f) != 1 || f[0] != "a" {
		t.Fatalf("after a minute: %v, want [a]", f)
	}
	c.Advance(time.Minute)
	if f := got(); len(f) != 1 {
		t.Fatalf("b fired at its replaced deadline: %v", f)
	}
	c.Advance(time.Minute)
	if f := got(); len(f) != 2 || f[1] != "b" {
		t.Fatalf("after three minutes: %v, want [a b]", f)
	}
	a.Set("d", t0.Add(10*time.Minute))
	a.Close()
	a.Set("e", t0.Add(10*time.Minute)) // after Close: never armed
	c.Advance(time.Hour)
	if f := got(); len(f) != 2 || c.Timers() != 0 {
		t.Fatalf("after Close: fired %v, %d timers armed", f, c.Timers())
	}
}
