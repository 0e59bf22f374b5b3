package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/usage"
)

var _ usage.Store = (*PG)(nil)

// The SQLSTATEs airlock_reserve raises (migrations/0002_exact_limits.sql).
const (
	codeExhausted = "AL001"
	codeBudget    = "AL002"
)

// Reserve implements usage.Store: one statement (airlock_reserve),
// one round trip, whose guarded updates the database serializes on the
// grant's grant_count row. Amounts travel as exact decimal text.
func (s *PG) Reserve(ctx context.Context, id string, maxUses int64, amounts, budget map[string]float64) error {
	keys, amts := decimals(amounts)
	buds := make([]string, len(keys))
	for i, k := range keys {
		buds[i] = decimal(budget[k]) // a key without a budget has none left
	}
	_, err := s.pool.Exec(ctx, `SELECT airlock_reserve($1, $2, $3::text[], $4::text[]::numeric[], $5::text[]::numeric[])`,
		id, maxUses, keys, amts, buds)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeExhausted:
			return grants.ErrGrantExhausted
		case codeBudget:
			return fmt.Errorf("%w: %s", grants.ErrBudgetExceeded, budgetKey(pe.Message))
		}
	}
	return err
}

// Release implements usage.Store.
func (s *PG) Release(ctx context.Context, id string, amounts map[string]float64) error {
	keys, amts := decimals(amounts)
	_, err := s.pool.Exec(ctx, `SELECT airlock_release($1, $2::text[], $3::text[]::numeric[])`, id, keys, amts)
	return err
}

// decimals lists amounts by key (sorted: every reservation updates a
// grant's rows in one order) as exact decimal text.
func decimals(amounts map[string]float64) (keys, values []string) {
	keys = make([]string, 0, len(amounts))
	for k := range amounts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	values = make([]string, len(keys))
	for i, k := range keys {
		values[i] = decimal(amounts[k])
	}
	return keys, values
}

// decimal is v's shortest exact decimal text (0.1 is "0.1", not its
// binary expansion): what the grant's author wrote.
func decimal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// budgetKey is the key airlock_reserve names in "budget exceeded: <key>".
func budgetKey(msg string) string {
	const prefix = "budget exceeded: "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}
