package broker

import (
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/clock"
)

// expiryTimers wakes the approvals service when a pending action's expiry
// comes: one timer per action on the injected clock. A timer only wakes:
// the clock decides, and an early wake-up (the clock is behind the timer)
// sleeps again until the expiry.
type expiryTimers struct {
	clock clock.Clock
	now   func() time.Time
	fire  func(id string) // the action's expiry has come

	mu     sync.Mutex
	timers map[string]clock.Timer // nil once closed
}

func newExpiryTimers(c clock.Clock, now func() time.Time, fire func(id string)) *expiryTimers {
	return &expiryTimers{clock: c, now: now, fire: fire, timers: map[string]clock.Timer{}}
}

// schedule arms the wake-up of action id's expiry at at.
func (e *expiryTimers) schedule(id string, at time.Time) {
	t := e.clock.AfterFunc(max(at.Sub(e.now()), 0), func() {
		if e.now().Before(at) {
			e.schedule(id, at)
			return
		}
		e.fire(id)
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.timers == nil { // closed
		t.Stop()
		return
	}
	if old, ok := e.timers[id]; ok {
		old.Stop() // one wake-up per action
	}
	e.timers[id] = t
}

// armed reports whether action id's wake-up is armed.
func (e *expiryTimers) armed(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.timers[id]
	return ok
}

// stop disarms action id's wake-up, if armed.
func (e *expiryTimers) stop(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.timers[id]; ok {
		t.Stop()
		delete(e.timers, id)
	}
}

// close stops every timer; none is armed after it.
func (e *expiryTimers) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.timers {
		t.Stop()
	}
	e.timers = nil
}
