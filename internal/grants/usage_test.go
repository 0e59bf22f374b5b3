package grants

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// usageState is what a test sees of a grant's counters.
type usageState struct {
	Uses, Pending int64
	Spent, Held   float64
}

func stateOf(l *Live) usageState {
	u, p := l.Usage(), l.Pending()
	return usageState{Uses: u.Uses, Pending: p.Uses, Spent: u.Spent["body.amount"], Held: p.Spent["body.amount"]}
}

// TestPendingReservations walks a grant with max_uses 3 and a budget of 10
// through sequences of calls, gated calls (Pend) and their outcomes: a
// pending action counts against both limits until it is released or
// consumed, and nothing ever lets the grant exceed either.
func TestPendingReservations(t *testing.T) {
	type step struct {
		op      string // call, gate, consume, release, restore, refund
		amount  float64
		wantErr error
	}
	tests := []struct {
		name  string
		steps []step
		want  usageState
	}{
		{"pending holds uses", []step{{"gate", 1, nil}, {"gate", 1, nil}, {"gate", 1, nil}, {"call", 1, ErrGrantExhausted}, {"gate", 1, ErrGrantExhausted}},
			usageState{Uses: 0, Pending: 3, Held: 3}},
		{"pending holds budget", []step{{"gate", 6, nil}, {"call", 5, ErrBudgetExceeded}, {"call", 4, nil}},
			usageState{Uses: 1, Pending: 1, Spent: 4, Held: 6}},
		{"release frees", []step{{"gate", 6, nil}, {"release", 6, nil}, {"call", 9, nil}},
			usageState{Uses: 1, Spent: 9}},
		{"consume turns pending into usage", []step{{"gate", 6, nil}, {"gate", 4, nil}, {"consume", 6, nil}, {"call", 1, ErrBudgetExceeded}, {"consume", 4, nil}},
			usageState{Uses: 2, Spent: 10}},
		{"refund after consume", []step{{"gate", 6, nil}, {"consume", 6, nil}, {"refund", 6, nil}, {"call", 10, nil}},
			usageState{Uses: 1, Spent: 10}},
		// After a restart that counted an action twice (its use in the
		// persisted usage and in the restored pending action), executing it
		// is refused rather than exceeding the limit.
		{"restored beyond the limit is refused at execution", []step{{"call", 1, nil}, {"call", 1, nil}, {"call", 1, nil}, {"restore", 1, nil}, {"consume", 1, ErrGrantExhausted}, {"release", 1, nil}},
			usageState{Uses: 3, Spent: 3}},
		{"restored counts against new calls", []step{{"restore", 8, nil}, {"call", 3, ErrBudgetExceeded}, {"call", 2, nil}, {"call", 0, nil}, {"call", 0, ErrGrantExhausted}},
			usageState{Uses: 2, Pending: 1, Spent: 2, Held: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Upstream: "pay", MaxUses: 3, Budget: map[string]float64{"body.amount": 10},
				Rules: []Rule{{Method: "POST", Path: "/pay"}}}
			g := mustLive(t, spec)
			version := g.Usage().Version
			for i, s := range tt.steps {
				amounts := map[string]float64{"body.amount": s.amount}
				var err error
				switch s.op {
				case "call", "gate":
					var d *Decision
					d, err = Evaluate(t0, []*Live{g}, "pay", mustCall(t, "POST", "/pay", "", fmt.Sprintf(`{"amount": %v}`, s.amount)))
					if err == nil && s.op == "gate" {
						d.Pend()
						d.Release() // a no-op once pending
					}
				case "consume":
					err = g.ConsumePending(amounts)
				case "release":
					g.ReleasePending(amounts)
				case "restore":
					g.RestorePending(amounts)
				case "refund":
					g.Refund(amounts)
				}
				if !errors.Is(err, s.wantErr) || (err == nil) != (s.wantErr == nil) {
					t.Fatalf("step %d (%s %v): err %v, want %v", i, s.op, s.amount, err, s.wantErr)
				}
				// Every change of usage advances its version; nothing else does.
				v := g.Usage().Version
				changed := err == nil && s.op != "release" && s.op != "restore"
				if changed && v <= version || !changed && v != version {
					t.Fatalf("step %d (%s): version %d after %d (usage changed: %v)", i, s.op, v, version, changed)
				}
				version = v
			}
			if diff := cmp.Diff(tt.want, stateOf(g)); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
		})
	}
}

// A grant compiled from a stored usage continues its version, so snapshots
// taken after a restart supersede the ones persisted before it.
func TestUsageVersionContinuesAfterCompile(t *testing.T) {
	g, err := Compile(Grant{ID: "g", Spec: Spec{Upstream: "pay", MaxUses: 5, Rules: []Rule{{Method: "GET", Path: "/x"}}}, ExpiresAt: t0.Add(1e12)},
		Usage{Uses: 2, Version: 41})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Evaluate(t0, []*Live{g}, "pay", mustCall(t, "GET", "/x", "", "")); err != nil {
		t.Fatal(err)
	}
	if u := g.Usage(); u.Uses != 3 || u.Version != 42 {
		t.Fatalf("usage %+v, want 3 uses at version 42", u)
	}
}
