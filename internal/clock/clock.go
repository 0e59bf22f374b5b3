// Package clock is the broker's one source of time. Every expiry (pending
// actions, session tokens, API tokens, reviewer log-ins, SigV4 request
// times, credential caches) is decided by a Clock's Now; its AfterFunc only
// wakes the broker to decide. The server runs on Real; tests use a Fake and
// Advance it instead of waiting.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and wakes callers later.
type Clock interface {
	// Now is the time every expiry is decided by.
	Now() time.Time
	// AfterFunc calls f once d has passed on this clock: in its own
	// goroutine on Real, synchronously from Advance on a Fake. A timer is
	// only a wake-up: f decides with Now, since a wall clock may be set
	// back or forth meanwhile.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call; it reports whether it did (false: the call
	// already ran or was stopped).
	Stop() bool
}

// Real is the wall clock with the runtime's timers.
func Real() Clock { return realClock{now: time.Now} }

// WithNow is a clock that tells time by now and wakes with the runtime's
// timers (a caller that injects only a Now function).
func WithNow(now func() time.Time) Clock { return realClock{now: now} }

type realClock struct{ now func() time.Time }

func (c realClock) Now() time.Time { return c.now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a clock for tests: its time moves only by Advance, which runs the
// timers that come due, in order, before it returns.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[*fakeTimer]struct{}
}

// NewFake is a Fake at t.
func NewFake(t time.Time) *Fake { return &Fake{now: t, timers: map[*fakeTimer]struct{}{}} }

// Now implements Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock. f runs from the Advance that reaches Now()+d
// (d <= 0: the next Advance, even Advance(0)), never from AfterFunc itself.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	c.timers[t] = struct{}{}
	return t
}

// Advance moves the clock forward by d as time would pass: it stops at
// each timer due by then, in the order they come due, sets the clock to its
// time and runs it (and the timers that the calls it runs set, when due by
// then), one at a time. It returns when they have returned.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(max(d, 0))
	for {
		var next *fakeTimer
		for t := range c.timers {
			if !t.at.After(end) && (next == nil || t.at.Before(next.at) || t.at.Equal(next.at) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			break
		}
		delete(c.timers, next)
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// Timers is the number of timers not yet run or stopped.
func (c *Fake) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	c   *Fake
	at  time.Time
	seq uint64
	f   func()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}
