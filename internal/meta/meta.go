// Package meta is the store port for the broker's small state values, each
// under a key: the installation secret (internal/broker), the kill-switch's
// state (internal/killswitch) and the minters' sealed state. It is its own
// package because several services share the one port; each may declare
// the narrower interface it needs (killswitch.Store), which a Store
// satisfies.
package meta

import (
	"context"
	"errors"
)

// ErrNotFound is Store.Meta's error for a key never written (an adapter
// may wrap it with its own error: errors.Is matches). The contract suite
// internal/store/storetest checks it.
var ErrNotFound = errors.New("meta key not found")

// Store holds small values under a key.
type Store interface {
	// Meta returns the value last written under key (a copy the caller
	// may keep), or ErrNotFound for a key never written.
	Meta(ctx context.Context, key string) ([]byte, error)
	// PutMeta creates or replaces the value under key; it is durable when
	// it returns.
	PutMeta(ctx context.Context, key string, value []byte) error
	// CreateMeta stores value under key unless a value is stored there
	// already, and returns the value stored (value when it was absent, a
	// copy): of callers racing on an empty key, across every process on
	// the store, all get the one value that won. Durable when it returns.
	CreateMeta(ctx context.Context, key string, value []byte) ([]byte, error)
}
