package clock

import (
	"sync"
	"time"
)

// Alarms wake their owner when a deadline comes: one timer per key (an
// action's expiry, a session's), on a Clock. A timer only wakes: the clock
// decides, and an early wake-up (the clock is behind the timer) sleeps
// again until the deadline.
type Alarms struct {
	clock Clock
	fire  func(key string) // key's deadline has come

	mu     sync.Mutex
	timers map[string]Timer // nil once closed
}

// NewAlarms makes alarms on c that call fire with a key when its deadline
// comes (on a goroutine of the clock's).
func NewAlarms(c Clock, fire func(key string)) *Alarms {
	return &Alarms{clock: c, fire: fire, timers: map[string]Timer{}}
}

// Set arms key's alarm at at, in place of one armed before.
func (a *Alarms) Set(key string, at time.Time) {
	t := a.clock.AfterFunc(max(at.Sub(a.clock.Now()), 0), func() {
		if a.clock.Now().Before(at) {
			a.Set(key, at)
			return
		}
		a.fire(key)
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timers == nil { // closed
		t.Stop()
		return
	}
	if old, ok := a.timers[key]; ok {
		old.Stop() // one alarm per key
	}
	a.timers[key] = t
}

// Armed reports whether key's alarm is armed.
func (a *Alarms) Armed(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.timers[key]
	return ok
}

// Stop disarms key's alarm, if armed.
func (a *Alarms) Stop(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.timers[key]; ok {
		t.Stop()
		delete(a.timers, key)
	}
}

// Close stops every alarm; none is armed after it.
func (a *Alarms) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.timers {
		t.Stop()
	}
	a.timers = nil
}
