package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/usage"
)

// testLimits: max_uses and budgets are exact under concurrency, through
// the reservation the call pipeline makes (grants.Evaluate): in memory for
// a store without a usage.Store (bbolt), in the store for one with it
// (PostgreSQL), where the stored usage is then the count itself.
func testLimits(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()
	p := open(t)
	mk := func(t *testing.T, id string, spec grants.Spec) *grants.Live {
		t.Helper()
		g := grants.Grant{ID: id, SessionID: "ses_limits", TaskID: "task-42", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), CreatedBy: "tok_operator", Spec: spec}
		must(t, p.Sessions.PutGrant(ctx, &g, grants.Usage{}))
		l, err := grants.Compile(g, grants.Usage{})
		must(t, err)
		if p.Usage != nil {
			l.SetCounter(usage.NewCounter(p.Usage, slog.New(slog.DiscardHandler)))
		}
		return l
	}
	call := func(t *testing.T, amount string) *grants.Call {
		segs, err := grants.CanonicalPath("/pay", grants.PathOptions{})
		must(t, err)
		c := &grants.Call{Method: "POST", Segments: segs}
		if amount != "" {
			v, err := grants.ParseJSON([]byte(`{"amount": ` + amount + `}`))
			must(t, err)
			c.Body, c.BodyJSON, c.HasBody = v, true, true
		}
		return c
	}
	// race runs n concurrent reservations and returns how many were allowed
	// and the refusals by error, each refusal one of want.
	race := func(t *testing.T, l *grants.Live, n int, amount string, want error) (allowed int, ds []*grants.Decision) {
		t.Helper()
		var ok atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := grants.Evaluate(t0, []*grants.Live{l}, "pay", call(t, amount))
				switch {
				case err == nil:
					ok.Add(1)
					mu.Lock()
					ds = append(ds, d)
					mu.Unlock()
				case !errors.Is(err, want):
					t.Errorf("refusal %v, want %v", err, want)
				}
			}()
		}
		close(start)
		wg.Wait()
		return int(ok.Load()), ds
	}
	rule := []grants.Rule{{Method: "POST", Path: "/pay"}}

	t.Run("max_uses", func(t *testing.T) {
		l := mk(t, "grt_uses", grants.Spec{Upstream: "pay", MaxUses: 10, Rules: rule})
		n, ds := race(t, l, 64, "", grants.ErrGrantExhausted)
		if n != 10 {
			t.Fatalf("64 concurrent calls on max_uses 10: %d allowed, want exactly 10", n)
		}
		if p.Usage != nil {
			r, err := p.Sessions.Grant(ctx, "grt_uses")
			must(t, err)
			diff(t, "stored uses (the count)", int64(10), r.Usage.Uses)
		}
		ds[0].Release() // a call not sent gives its use back: one more, then none
		if n, _ := race(t, l, 8, "", grants.ErrGrantExhausted); n != 1 {
			t.Errorf("after one release: %d allowed, want 1", n)
		}
	})

	t.Run("budget", func(t *testing.T) {
		// Ten tenths fit a budget of 1 exactly; the eleventh does not.
		l := mk(t, "grt_budget", grants.Spec{Upstream: "pay", Budget: map[string]float64{"body.amount": 1}, Rules: rule})
		n, ds := race(t, l, 64, "0.1", grants.ErrBudgetExceeded)
		if n < 9 || n > 10 {
			t.Fatalf("64 concurrent calls of 0.1 on a budget of 1: %d allowed, want 10 (9 with binary sums)", n)
		}
		if p.Usage != nil {
			if n != 10 {
				t.Errorf("a shared count sums exactly: %d allowed, want 10", n)
			}
			r, err := p.Sessions.Grant(ctx, "grt_budget")
			must(t, err)
			diff(t, "stored spent (the count)", map[string]float64{"body.amount": 1}, r.Usage.Spent)
		}
		ds[0].Release()
		if n, _ := race(t, l, 8, "0.1", grants.ErrBudgetExceeded); n != 1 {
			t.Errorf("after one release: %d allowed, want 1", n)
		}
		// Uses and budget together: a refusal on the budget takes no use.
		both := mk(t, "grt_both", grants.Spec{Upstream: "pay", MaxUses: 3, Budget: map[string]float64{"body.amount": 10}, Rules: rule})
		for i, tt := range []struct {
			amount string
			want   error
		}{{"6", nil}, {"5", grants.ErrBudgetExceeded}, {"4", nil}, {"0", nil}, {"0", grants.ErrGrantExhausted}} {
			_, err := grants.Evaluate(t0, []*grants.Live{both}, "pay", call(t, tt.amount))
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("step %d (%s): %v, want %v", i, tt.amount, err, tt.want)
			}
		}
		if p.Usage != nil {
			r, err := p.Sessions.Grant(ctx, "grt_both")
			must(t, err)
			diff(t, "stored usage", fmt.Sprint(int64(3), map[string]float64{"body.amount": 10}), fmt.Sprint(r.Usage.Uses, r.Usage.Spent))
		}
	})
}
