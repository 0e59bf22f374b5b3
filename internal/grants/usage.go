package grants

import "fmt"

// A grant's counters, all under its lock:
//
//   - usage: uses and budgeted amounts taken by calls that were (or are
//     being) sent, with a Version that grows with every change. Snapshots of
//     it (Usage) are what the store persists; it keeps the highest Version.
//   - pending: uses and amounts held by pending actions (gated calls waiting
//     for a reviewer). They count against max_uses and budgets like usage
//     does, so a session cannot queue more than the grant could ever allow.
//     They are not persisted: after a restart they are rebuilt from the
//     stored pending actions (RestorePending).
//
// A gated call's decision reserves like any other (Evaluate), then Pend
// moves it to pending; the action then leaves pending exactly once, through
// ConsumePending (executed) or ReleasePending (denied, expired, failed,
// session killed).

// Counter counts a grant's uses and budgeted amounts where every broker
// sharing a store sees them (a usage.Store on PostgreSQL). With
// one (SetCounter), it alone decides whether a use is left, and a pending
// action's reservation stays counted in it until the action is released or
// sent: Pend, RestorePending and ConsumePending change nothing there. The
// Live's own counters then only mirror this process's share, for views.
type Counter interface {
	// Reserve takes one use and amounts of g unless that would pass its
	// max_uses or a budget: ErrGrantExhausted or ErrBudgetExceeded, or
	// another error when the count cannot be reached (nothing taken).
	Reserve(g *Grant, amounts map[string]float64) error
	// Release gives back one use and amounts of g (a reservation whose
	// call was not sent).
	Release(g *Grant, amounts map[string]float64)
}

// SetCounter makes c count the grant's limits (see Counter). Call it
// before the grant is used.
func (l *Live) SetCounter(c Counter) { l.counter = c }

// reserve takes one use and amounts when the grant's usage plus its pending
// reservations leave room for them.
func (l *Live) reserve(amounts []amount) error {
	if l.counter != nil {
		return l.reserveShared(amounts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Grant.MaxUses > 0 && l.usage.Uses+l.pending.Uses >= l.Grant.MaxUses {
		return ErrGrantExhausted
	}
	for _, a := range amounts {
		if l.usage.Spent[a.key]+l.pending.Spent[a.key]+a.v > l.Grant.Budget[a.key] {
			return fmt.Errorf("%w: %s", ErrBudgetExceeded, a.key)
		}
	}
	l.usage.Uses++
	for _, a := range amounts {
		l.usage.Spent[a.key] += a.v
	}
	l.usage.Version++
	return nil
}

// reserveShared reserves through the counter, then mirrors it here.
func (l *Live) reserveShared(amounts []amount) error {
	var m map[string]float64
	if len(amounts) > 0 {
		m = make(map[string]float64, len(amounts))
		for _, a := range amounts {
			m[a.key] += a.v
		}
	}
	if err := l.counter.Reserve(&l.Grant, m); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.usage.Uses++
	for _, a := range amounts {
		l.usage.Spent[a.key] += a.v
	}
	l.usage.Version++
	return nil
}

// Shared reports whether a Counter counts the grant's limits (SetCounter).
func (l *Live) Shared() bool { return l.counter != nil }

// Refund gives back the use and amounts a decision reserved, or that
// ConsumePending took, when the call does not happen after all.
func (l *Live) Refund(amounts map[string]float64) {
	if l.counter != nil {
		l.counter.Release(&l.Grant, amounts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.usage.Uses--
	for k, v := range amounts {
		l.usage.Spent[k] -= v
	}
	l.usage.Version++
}

// Usage returns a copy of the grant's consumption (pending reservations
// excluded), with its Version.
func (l *Live) Usage() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyUsage(l.usage)
}

// Pending returns the uses and amounts held by the grant's pending actions.
func (l *Live) Pending() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := copyUsage(l.pending)
	u.Version = 0
	return u
}

func copyUsage(from Usage) Usage {
	u := Usage{Uses: from.Uses, Spent: make(map[string]float64, len(from.Spent)), Version: from.Version}
	for k, v := range from.Spent {
		u.Spent[k] = v
	}
	return u
}

// Pend turns the decision's reservation into a pending action's: it keeps
// counting against the grant's limits, but is not usage until
// ConsumePending. The decision no longer holds anything (Release is a no-op).
func (d *Decision) Pend() {
	if d == nil || d.released || d.Grant == nil {
		return
	}
	d.released = true
	l := d.Grant
	l.mu.Lock()
	defer l.mu.Unlock()
	l.usage.Uses--
	l.pending.Uses++
	if len(d.amounts) > 0 && l.pending.Spent == nil {
		l.pending.Spent = map[string]float64{}
	}
	for _, a := range d.amounts {
		l.usage.Spent[a.key] -= a.v
		l.pending.Spent[a.key] += a.v
	}
	l.usage.Version++
}

// RestorePending counts a stored pending action's reservation again (after
// a restart). It does not check the limits: the action exists; executing it
// still does (ConsumePending).
func (l *Live) RestorePending(amounts map[string]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counter != nil {
		// The usage loaded from the counter holds the action's use: move it.
		l.usage.Uses--
		for k, v := range amounts {
			l.usage.Spent[k] -= v
		}
	}
	l.pending.Uses++
	if len(amounts) > 0 && l.pending.Spent == nil {
		l.pending.Spent = map[string]float64{}
	}
	for k, v := range amounts {
		l.pending.Spent[k] += v
	}
}

// ReleasePending gives back a pending action's reservation: it was denied,
// expired or failed before it was sent.
func (l *Live) ReleasePending(amounts map[string]float64) {
	if l.counter != nil {
		l.counter.Release(&l.Grant, amounts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Uses--
	for k, v := range amounts {
		l.pending.Spent[k] -= v
	}
}

// ForgetPending stops counting a pending action's reservation here
// without giving it back to the Counter: it left pending unsent and the
// shared count released it where the transition was made (the
// usage.Store). Only the mirror moves.
func (l *Live) ForgetPending(amounts map[string]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.Uses--
	for k, v := range amounts {
		l.pending.Spent[k] -= v
	}
}

// ConsumePending turns a pending action's reservation into usage when the
// action executes. Usage alone must stay within the limits (it can only
// fail after a restart that counted a use twice: refused, never exceeded);
// on failure nothing changes and the caller releases the reservation.
// Give the use back with Refund if the call does not happen after all.
func (l *Live) ConsumePending(amounts map[string]float64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// With a Counter the reservation is counted there already: it is the
	// use this call takes, nothing to check again.
	if l.counter == nil {
		if l.Grant.MaxUses > 0 && l.usage.Uses >= l.Grant.MaxUses {
			return ErrGrantExhausted
		}
		for k, v := range amounts {
			if l.usage.Spent[k]+v > l.Grant.Budget[k] {
				return fmt.Errorf("%w: %s", ErrBudgetExceeded, k)
			}
		}
	}
	l.pending.Uses--
	l.usage.Uses++
	for k, v := range amounts {
		l.pending.Spent[k] -= v
		l.usage.Spent[k] += v
	}
	l.usage.Version++
	return nil
}
