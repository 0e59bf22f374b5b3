// Package store declares what the broker persists (sessions, grants, API
// tokens, broker state and the audit chain): the Store interface, its
// sentinel errors and record-neutral types. It imports no database;
// internal/store/boltstore is the embedded bbolt implementation.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/auditlog"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/session"
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

// GrantRecord is a stored grant with its usage.
type GrantRecord struct {
	Grant grants.Grant
	Usage grants.Usage
}

// Store is everything the broker persists. Implementations must be safe for
// concurrent use.
type Store interface {
	auditlog.Store // the audit chain and its index by session
	approval.ActionStore

	// PutSession creates or replaces a session.
	PutSession(ctx context.Context, s *session.Session) error
	// CreateSession stores a new session and its grants in one transaction.
	CreateSession(ctx context.Context, s *session.Session, gs []grants.Grant) error
	// Session returns one session or sessions.ErrNotFound.
	Session(ctx context.Context, id string) (session.Session, error)
	// Sessions lists sessions with ids after `after`, in id (creation) order, at most limit.
	Sessions(ctx context.Context, after string, limit int) ([]session.Session, error)

	// PutGrant creates or replaces a grant (and its usage).
	PutGrant(ctx context.Context, g *grants.Grant, u grants.Usage) error
	// Grant returns one grant or sessions.ErrNotFound.
	Grant(ctx context.Context, id string) (GrantRecord, error)
	// SessionGrants lists the grants of a session.
	SessionGrants(ctx context.Context, sessionID string) ([]GrantRecord, error)

	// API tokens' digests (apitokens.ErrNotFound).
	apitokens.Store

	// Small broker state values under a key (meta.ErrNotFound): the
	// installation secret, the kill-switch's state.
	meta.Store

	// PendingSummary counts the pending actions and gives the oldest one's
	// creation time (zero when none), without decoding them.
	PendingSummary(ctx context.Context) (n int, oldest time.Time, err error)

	// Ready reports whether the store can serve.
	Ready(ctx context.Context) error
	Close() error
}
