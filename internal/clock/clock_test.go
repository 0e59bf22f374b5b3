package clock_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestFakeRunsDueTimersInOrder(t *testing.T) {
	c := clock.NewFake(t0)
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, name+"@"+c.Now().Sub(t0).String()) }
	}
	c.AfterFunc(2*time.Minute, at("b"))
	c.AfterFunc(time.Minute, at("a"))
	c.AfterFunc(2*time.Minute, at("c")) // same time as b: set after it, runs after it
	stopped := c.AfterFunc(90*time.Second, at("stopped"))
	late := c.AfterFunc(time.Hour, at("late"))
	// A timer set by a timer runs in the same Advance when it is due by then.
	c.AfterFunc(time.Minute, func() { c.AfterFunc(0, at("chained")) })

	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer: false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop: true")
	}
	c.Advance(59 * time.Second)
	if len(got) != 0 {
		t.Fatalf("before any is due: %v", got)
	}
	c.Advance(2 * time.Minute)
	want := []string{"a@1m0s", "chained@1m0s", "b@2m0s", "c@2m0s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("runs (-want +got):\n%s", diff)
	}
	if n := c.Timers(); n != 1 {
		t.Fatalf("pending timers: %d, want 1 (late)", n)
	}
	if late.Stop() != true || c.Timers() != 0 {
		t.Fatal("stop the late timer")
	}
	c.Advance(2 * time.Hour)
	if !c.Now().Equal(t0.Add(2*time.Hour + 2*time.Minute + 59*time.Second)) {
		t.Fatalf("after the advances: %v", c.Now())
	}
	if len(got) != len(want) {
		t.Fatalf("a stopped timer ran: %v", got)
	}
}

func TestFakeDueTimerWaitsForAdvance(t *testing.T) {
	c := clock.NewFake(t0)
	ran := false
	c.AfterFunc(-time.Second, func() { ran = true })
	if ran {
		t.Fatal("AfterFunc ran its function itself")
	}
	c.Advance(0)
	if !ran || !c.Now().Equal(t0) {
		t.Fatalf("Advance(0): ran=%v now=%v", ran, c.Now())
	}
}

func TestWithNowTellsInjectedTime(t *testing.T) {
	c := clock.WithNow(func() time.Time { return t0 })
	if !c.Now().Equal(t0) {
		t.Fatal(c.Now())
	}
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	<-done
}
