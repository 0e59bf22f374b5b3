// Package store declares what the broker persists (sessions, grants, API
// tokens, broker state and the audit chain): the Store interface, its
// sentinel errors and record-neutral types. It imports no database;
// internal/store/boltstore is the embedded bbolt implementation.
package store

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auditlog"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// Durability modes of the audit log (DESIGN §7).
const (
	// DurabilityFsync: a record is on disk before the caller is answered.
	DurabilityFsync = "fsync"
	// DurabilityBuffered: a record is handed to the OS before the answer
	// (it survives a broker crash) and fsync'd within the store's sync interval (a power
	// cut can lose that window).
	DurabilityBuffered = "buffered"
)

// ErrNotFound is what an adapter's not-found errors also match. The
// broker's ports each declare their own sentinel (sessions.ErrNotFound,
// apitokens.ErrNotFound, meta.ErrNotFound, approval.ErrNotFound),
// which an adapter returns or wraps, and the broker tests only those; the
// contract suite internal/store/storetest checks them.
var ErrNotFound = errors.New("not found")

// PortNotFound is an adapter's not-found error of one port: errors.Is
// matches the port's sentinel (what the broker tests) and ErrNotFound.
func PortNotFound(port error) error { return portNotFound{port} }

type portNotFound struct{ port error }

func (e portNotFound) Error() string   { return e.port.Error() }
func (e portNotFound) Unwrap() []error { return []error{e.port, ErrNotFound} }

// Store is everything the broker persists: every port of the broker's
// services, from one database. Implementations must be safe for
// concurrent use.
type Store interface {
	sessions.Store       // sessions and grants (sessions.ErrNotFound)
	auditlog.Store       // the audit chain and its index by session
	approval.ActionStore // actions awaiting or after approval (approval.ErrNotFound)
	apitokens.Store      // API tokens' digests (apitokens.ErrNotFound)
	// Small broker state values under a key (meta.ErrNotFound): the
	// installation secret, the kill-switch's state, minters' state, the
	// MCP tools' first digests.
	meta.Store

	// Ready reports whether the store can serve.
	Ready(ctx context.Context) error
	Close() error
}
