package usage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/usage"
)

// answers is a Store that answers every Reserve with err.
type answers struct{ err error }

func (a answers) Reserve(context.Context, string, int64, map[string]float64, map[string]float64) error {
	return a.err
}
func (answers) Release(context.Context, string, map[string]float64) error { return nil }

// The counter passes the limits' own refusals through and turns a store
// that does not answer into ErrUnavailable (the call is refused, closed).
func TestCounterReserve(t *testing.T) {
	down := errors.New("connection refused")
	tests := []struct {
		name  string
		store error
		want  error
	}{
		{name: "fail-exhausted", store: grants.ErrGrantExhausted, want: grants.ErrGrantExhausted},
		{name: "fail-budget", store: grants.ErrBudgetExceeded, want: grants.ErrBudgetExceeded},
		{name: "fail-store-down", store: down, want: usage.ErrUnavailable},
		{name: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := usage.NewCounter(answers{tt.store}, brokertest.Discard())
			err := c.Reserve(&grants.Grant{ID: "grt_1"}, nil)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Reserve = %v, want %v", err, tt.want)
			}
			if tt.store == down && !errors.Is(err, down) {
				t.Errorf("Reserve = %v: the store's error is lost", err)
			}
		})
	}
}
