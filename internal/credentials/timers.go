package credentials

import (
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/clock"
)

// sessionTimers revokes a session's leases when its expiry comes: one
// timer per session with leases, on the injected clock. A timer only
// wakes: the clock decides, and an early wake-up (the clock is behind the
// timer) sleeps again until the expiry.
type sessionTimers struct {
	clock clock.Clock
	fire  func(id string) // session id's expiry has come

	mu     sync.Mutex
	timers map[string]clock.Timer // nil once closed
}

func newSessionTimers(c clock.Clock, fire func(id string)) *sessionTimers {
	return &sessionTimers{clock: c, fire: fire, timers: map[string]clock.Timer{}}
}

// schedule arms the wake-up of session id's expiry at at.
func (e *sessionTimers) schedule(id string, at time.Time) {
	t := e.clock.AfterFunc(max(at.Sub(e.clock.Now()), 0), func() {
		if e.clock.Now().Before(at) {
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
		old.Stop() // one wake-up per session
	}
	e.timers[id] = t
}

// stop disarms session id's wake-up, if armed.
func (e *sessionTimers) stop(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.timers[id]; ok {
		t.Stop()
		delete(e.timers, id)
	}
}

// close stops every timer; none is armed after it.
func (e *sessionTimers) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.timers {
		t.Stop()
	}
	e.timers = nil
}
