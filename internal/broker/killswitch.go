package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
)

// KillswitchStore is what the kill-switch persists: its state, one small
// value under a key (see MetaStore).
type KillswitchStore = MetaStore

// killswitch is the global kill-switch service: its state in memory (read
// on every call), the period it cuts running calls in (halt), and its
// durable state and audit records.
type killswitch struct {
	store KillswitchStore
	audit *audit.Writer
	now   func() time.Time

	engaged atomic.Bool
	halt    atomic.Pointer[halt] // cancelled when the kill-switch is engaged
	mu      sync.Mutex           // serializes engaging and releasing
	// onEngage runs when the switch is engaged (here or by another
	// replica): every session's minted credentials are revoked.
	onEngage func()
}

// load reads the stored state (a broker restarts engaged if it was). It
// fails closed: a state that cannot be read is an error (the broker does
// not start released while the switch may be engaged: the change feed
// would not tell it later), one that cannot be parsed reads as engaged
// (as apply does).
func (k *killswitch) load(ctx context.Context) error {
	data, err := k.store.Meta(ctx, metaKillswitch)
	switch {
	case errors.Is(err, ErrMetaNotFound):
	case err != nil:
		return fmt.Errorf("read the kill-switch: %w", err)
	default:
		var st KillswitchState
		if json.Unmarshal(data, &st) != nil {
			st.Engaged = true // unreadable: closed
		}
		k.engaged.Store(st.Engaged)
	}
	k.halt.Store(newHalt(k.engaged.Load()))
	return nil
}

// state returns the global state.
func (k *killswitch) state(ctx context.Context) (KillswitchState, error) {
	var st KillswitchState
	data, err := k.store.Meta(ctx, metaKillswitch)
	if errors.Is(err, ErrMetaNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	st.Engaged = k.engaged.Load()
	return st, nil
}

// set engages or releases the switch on behalf of actor (whose id is by),
// persists the state and writes its audit record.
func (k *killswitch) set(ctx context.Context, actor audit.Actor, by string, engaged bool, reason string) (KillswitchState, error) {
	k.mu.Lock() // one change at a time: an engage acknowledged is never undone by a concurrent release
	defer k.mu.Unlock()
	st := KillswitchState{Engaged: engaged, By: by, Reason: reason, Since: k.now().UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	if engaged {
		k.engage() // refuse new calls and cut running ones at once, before the write
	}
	data, _ := json.Marshal(st)
	if err := k.store.PutMeta(ctx, metaKillswitch, data); err != nil {
		return KillswitchState{}, fmt.Errorf("persist kill-switch: %w", err)
	}
	typ := audit.TypeKillswitch
	if !engaged {
		typ = audit.TypeKillswitchOff
	}
	if _, err := k.audit.Append(ctx, audit.Event{Type: typ, Actor: actor, Reason: reason}, nil); err != nil {
		return KillswitchState{}, err
	}
	if !engaged {
		k.release()
	}
	return st, nil
}

// engage refuses new sandbox calls and cuts every running one.
func (k *killswitch) engage() {
	k.engaged.Store(true)
	k.halt.Load().cancel(ErrKillswitch)
	if k.onEngage != nil {
		k.onEngage()
	}
}

// release starts a new period in which calls may run.
func (k *killswitch) release() {
	if k.halt.Load().ctx.Err() != nil {
		k.halt.Store(newHalt(false))
	}
	k.engaged.Store(false)
}
