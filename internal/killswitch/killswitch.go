// Package killswitch is the global kill-switch: its state in memory (read on
// every sandbox call), the period it cuts running calls in, its durable state
// in the meta store and its audit records. The broker refuses calls while it
// is engaged and bounds every call by its period (broker.Bound).
package killswitch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/meta"
)

// ErrEngaged refuses sandbox calls while the switch is engaged, and is the
// cause a running call's context is cut with (see Service.Period).
var ErrEngaged = fault.New(fault.KillswitchEngaged, "global kill-switch engaged")

// MetaKey is the meta store key of the kill-switch's State (a store that is
// a change feed announces a write under it as changefeed.Killswitch).
const MetaKey = "killswitch"

// State is the global kill-switch, as stored (JSON) and reported.
type State struct {
	Engaged bool   `json:"engaged"`
	Since   string `json:"since,omitempty"`
	By      string `json:"by,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Store is what the kill-switch persists: its State under MetaKey. A
// meta.Store is one.
type Store interface {
	// Meta returns the value last written under key, or meta.ErrNotFound
	// for a key never written.
	Meta(ctx context.Context, key string) ([]byte, error)
	// PutMeta creates or replaces the value under key; it is durable when
	// it returns.
	PutMeta(ctx context.Context, key string, value []byte) error
}

// Service is the global kill-switch service.
type Service struct {
	store Store
	audit *audit.Writer
	now   func() time.Time
	// onEngage runs when the switch is engaged (here or, through Apply,
	// by another replica).
	onEngage func()

	engaged atomic.Bool
	period  atomic.Pointer[period] // cancelled when the switch is engaged
	mu      sync.Mutex             // serializes engaging and releasing
}

// New reads the stored state (a broker restarts engaged if it was). It
// fails closed: a state that cannot be read is an error (the broker does
// not start released while the switch may be engaged: the change feed
// would not tell it later), one that cannot be parsed reads as engaged
// (as Apply does). onEngage, if not nil, runs each time the switch is
// engaged (the broker revokes every session's minted credentials).
func New(ctx context.Context, store Store, w *audit.Writer, now func() time.Time, onEngage func()) (*Service, error) {
	s := &Service{store: store, audit: w, now: now, onEngage: onEngage}
	engaged, _, err := s.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the kill-switch: %w", err)
	}
	s.engaged.Store(engaged)
	s.period.Store(newPeriod(engaged))
	return s, nil
}

// read reads the stored state: found is false for a state never written
// (released); a state that cannot be parsed reads as engaged (closed).
func (s *Service) read(ctx context.Context) (engaged, found bool, err error) {
	data, err := s.store.Meta(ctx, MetaKey)
	if errors.Is(err, meta.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	var st State
	if json.Unmarshal(data, &st) != nil {
		return true, true, nil // unreadable: closed
	}
	return st.Engaged, true, nil
}

// Engaged reports whether the switch is engaged here (in memory).
func (s *Service) Engaged() bool { return s.engaged.Load() }

// Stored reads from the store whether the switch is engaged (an unparsable
// state reads engaged): what another replica may have set that this one has
// not applied yet.
func (s *Service) Stored(ctx context.Context) (bool, error) {
	engaged, _, err := s.read(ctx)
	return engaged, err
}

// State returns the stored state, with Engaged as this broker holds it.
func (s *Service) State(ctx context.Context) (State, error) {
	var st State
	data, err := s.store.Meta(ctx, MetaKey)
	if errors.Is(err, meta.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	st.Engaged = s.engaged.Load()
	return st, nil
}

// Set engages or releases the switch on behalf of actor (whose id is by),
// persists the state and writes its audit record.
func (s *Service) Set(ctx context.Context, actor audit.Actor, by string, engaged bool, reason string) (State, error) {
	s.mu.Lock() // one change at a time: an engage acknowledged is never undone by a concurrent release
	defer s.mu.Unlock()
	st := State{Engaged: engaged, By: by, Reason: reason, Since: s.now().UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	if engaged {
		s.engage() // refuse new calls and cut running ones at once, before the write
	}
	data, _ := json.Marshal(st)
	if err := s.store.PutMeta(ctx, MetaKey, data); err != nil {
		return State{}, fmt.Errorf("persist kill-switch: %w", err)
	}
	typ := audit.TypeKillswitch
	if !engaged {
		typ = audit.TypeKillswitchOff
	}
	if _, err := s.audit.Append(ctx, audit.Event{Type: typ, Actor: actor, Reason: reason}, nil); err != nil {
		return State{}, err
	}
	if !engaged {
		s.release()
	}
	return st, nil
}

// Apply brings the switch in line with its stored state (set by any
// replica): engaged cuts every running call here too.
func (s *Service) Apply(ctx context.Context) error {
	engaged, found, err := s.read(ctx)
	if err != nil || !found {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case engaged:
		s.engage()
	case s.engaged.Load():
		s.release()
	}
	return nil
}

// engage refuses new sandbox calls and cuts every running one.
func (s *Service) engage() {
	s.engaged.Store(true)
	s.period.Load().cancel(ErrEngaged)
	if s.onEngage != nil {
		s.onEngage()
	}
}

// release starts a new period in which calls may run.
func (s *Service) release() {
	if s.period.Load().ctx.Err() != nil {
		s.period.Store(newPeriod(false))
	}
	s.engaged.Store(false)
}
