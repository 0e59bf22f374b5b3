// Package usage counts grants' uses and budgets in a store every broker
// sharing it sees (PostgreSQL), so max_uses and budgets are exact across
// replicas and restarts: the Store port, and the grants.Counter over it.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
)

// Store counts grants' uses and budgets where every broker sharing the
// store sees them, so max_uses and budgets are exact across replicas and
// restarts (DESIGN §9). Without one (bbolt: one broker per file) a grant
// counts in memory (grants.Live), persisted as snapshots with the audit
// records, as before.
//
// A pending action's reservation stays counted until it is released or
// sent: Reserve at the decision, nothing when the action is held, approved
// or executed. It goes back exactly once, cluster-wide:
//   - leaving pending unsent (denied, expired, failed): the store that is
//     both the approval.ActionStore and the usage Store releases it in UpdateAction's
//     own transaction, the one that moves the action out of pending; the
//     transition has one winner, so the release happens once, whichever
//     replica counted the action (its creator, one that restarted and
//     loaded it, or none alive);
//   - approved but not sent (kill-switch, session or grant ended, audit
//     down): the one replica that won the executing claim calls Release;
//   - never stored (PutAction failed): the replica that reserved it calls
//     Release.
//
// A crash between an execution's failure and its Release keeps the use
// counted: a limit may lose a use, it never gains one.
type Store interface {
	// Reserve takes one use and amounts of grant id if its counted uses
	// stay below maxUses (0: unlimited) and each amount's spent total
	// stays within budget[key] (a key without a budget has none left):
	// grants.ErrGrantExhausted or grants.ErrBudgetExceeded (wrapped, naming
	// the key) otherwise, with nothing taken. Durable when it returns.
	Reserve(ctx context.Context, id string, maxUses int64, amounts, budget map[string]float64) error
	// Release gives back one use and amounts of grant id, never below zero.
	Release(ctx context.Context, id string, amounts map[string]float64) error
}

// ErrUnavailable: a grant's limits could not be counted (the usage store
// did not answer); the call is refused, nothing was taken.
var ErrUnavailable = fault.Hidden(fault.UsageUnavailable, "grant usage unavailable")

// Timeout bounds one reservation or release. A sandbox call's
// reservation is not cut by its request's end: it completes or fails
// within this bound, so it is never left half-known.
const Timeout = 10 * time.Second

// NewCounter adapts a Store to the grants' Counter: what a grants.Live
// counts its limits with when the store is shared.
func NewCounter(s Store, log *slog.Logger) grants.Counter {
	return counter{store: s, log: log}
}

type counter struct {
	store Store
	log   *slog.Logger
}

func (c counter) Reserve(g *grants.Grant, amounts map[string]float64) error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	err := c.store.Reserve(ctx, g.ID, g.MaxUses, amounts, g.Budget)
	if err == nil || errors.Is(err, grants.ErrGrantExhausted) || errors.Is(err, grants.ErrBudgetExceeded) {
		return err
	}
	c.log.Error("reserve a grant's use", "grant_id", g.ID, "err", err)
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Release gives the use back; when the store cannot take it, the use stays
// counted (logged): the limit loses a use, it never gains one.
func (c counter) Release(g *grants.Grant, amounts map[string]float64) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.store.Release(ctx, g.ID, amounts); err != nil {
		c.log.Error("release a grant's use; it stays counted", "grant_id", g.ID, "err", err)
	}
}
