package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/usage"
)

// testRaces: transitions several brokers may make at once on one store.
func testRaces(t *testing.T, open func(t *testing.T) Ports) {
	ctx := context.Background()

	// An approval and the expiry sweep decide one pending action at once:
	// exactly one transition wins, the other sees the winner's state (so
	// the broker records the outcome once), and the action's reservation
	// on a shared count is given back once if it expired, kept if approved.
	t.Run("ExpiryRacesApproval", func(t *testing.T) {
		p := open(t)
		errUnchanged := errors.New("unchanged")
		for i := range 8 {
			a := sampleAction(fmt.Sprintf("act_%d", i), approval.Pending, t0)
			a.GrantID, a.ApprovalsRequired = fmt.Sprintf("grt_race%d", i), 1
			if p.Usage != nil { // the pending action holds the one use of max_uses 1
				g := grants.Grant{ID: a.GrantID, SessionID: a.SessionID, TaskID: "t", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
					Spec: grants.Spec{Upstream: "pay", MaxUses: 1, Rules: []grants.Rule{{Method: "POST", Path: "/pay"}}}}
				must(t, p.Sessions.PutGrant(ctx, &g, grants.Usage{}))
				must(t, p.Usage.Reserve(ctx, a.GrantID, 1, nil, nil))
			}
			must(t, p.Actions.PutAction(ctx, &a))
			to := []approval.Status{approval.Expired, approval.Executing}
			errs := make([]error, 2)
			saw := make([]approval.Status, 2)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for j, st := range to {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[j] = p.Actions.UpdateAction(ctx, a.ID, func(x *approval.Action) error {
						saw[j] = x.Status
						if x.Status != approval.Pending {
							return errUnchanged
						}
						x.Status = st
						if st == approval.Executing {
							x.Decisions = append(x.Decisions, approval.Review{Reviewer: "tok_r1", Verdict: "approve", At: t0})
						}
						return nil
					})
				}()
			}
			close(start)
			wg.Wait()
			var won approval.Status
			for j, err := range errs {
				switch {
				case err == nil && won == "":
					won = to[j]
				case err == nil:
					t.Fatalf("round %d: both the expiry and the approval won", i)
				case !errors.Is(err, errUnchanged):
					t.Fatalf("round %d: %s: %v", i, to[j], err)
				case saw[j] == approval.Pending:
					t.Fatalf("round %d: the loser (%s) last saw the action pending", i, to[j])
				}
			}
			if won == "" {
				t.Fatalf("round %d: neither the expiry nor the approval won", i)
			}
			got, err := p.Actions.Action(ctx, a.ID)
			must(t, err)
			if got.Status != won || (won == approval.Expired) != (len(got.Decisions) == 0) {
				t.Fatalf("round %d: stored %s with %d decisions, the winner made it %s", i, got.Status, len(got.Decisions), won)
			}
			if p.Usage != nil {
				err := p.Usage.Reserve(ctx, a.GrantID, 1, nil, nil)
				if won == approval.Expired && err != nil {
					t.Errorf("round %d: expired, its use was not given back: %v", i, err)
				}
				if won == approval.Executing && !errors.Is(err, grants.ErrGrantExhausted) {
					t.Errorf("round %d: approved, its use was given back (reserve: %v)", i, err)
				}
			}
		}
	})

	// A grant revoked while calls reserve and record their "allowed"
	// record on it: no call that starts after the revoke is acknowledged
	// is allowed, and the chain holds exactly the allowed calls' records.
	// On a store that guards the record (an audit.Sequencer: replicas on
	// one database) the revoke comes from "another broker": only the
	// store's write, the grant in memory still live, so the store's guard
	// alone must refuse. On a store without one, the broker's memory is
	// the truth on one replica: the revoke is the store's write, then the
	// grant in memory.
	t.Run("RevokeRacesAllowed", func(t *testing.T) {
		p := open(t)
		_, shared := p.Audit.(audit.Sequencer)
		s := sampleSession("ses_revoke")
		g := grants.Grant{ID: "grt_revoke", SessionID: s.ID, TaskID: s.TaskID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
			Spec: grants.Spec{Upstream: "pay", MaxUses: 100000, Rules: []grants.Rule{{Method: "POST", Path: "/pay"}}}}
		must(t, p.Sessions.CreateSession(ctx, &s, []grants.Grant{g}))
		l, err := grants.Compile(g, grants.Usage{})
		must(t, err)
		if p.Usage != nil {
			l.SetCounter(usage.NewCounter(p.Usage, slog.New(slog.DiscardHandler)))
		}
		w, err := audit.NewWriter(ctx, p.Audit, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
		must(t, err)
		segs, err := grants.CanonicalPath("/pay", grants.PathOptions{})
		must(t, err)

		var (
			revoked      atomic.Bool // set once the revoke returned
			allowed      atomic.Int64
			wg           sync.WaitGroup
			beforeEnough = make(chan struct{})
			once         sync.Once
		)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					after := revoked.Load()
					d, err := grants.Evaluate(t0, []*grants.Live{l}, "pay", &grants.Call{Method: "POST", Segments: segs})
					if err == nil {
						_, err = w.AppendGuarded(ctx, audit.Event{Type: audit.TypeCallAllowed, SessionID: s.ID, GrantID: g.ID, Decision: "allow"}, nil)
						switch {
						case err == nil:
							allowed.Add(1)
							if after {
								t.Error("a call that started after the revoke returned was allowed")
								return
							}
							if allowed.Load() >= 20 {
								once.Do(func() { close(beforeEnough) })
							}
							continue
						case !errors.Is(err, audit.ErrKilled):
							t.Errorf("allowed record: %v", err)
							return
						}
						d.Release()
					}
					if after {
						return // refused after the revoke: done
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-beforeEnough:
		case <-done:
			t.Fatal("the callers stopped before the revoke")
		}
		rg := g
		rg.RevokedAt = t0.Add(time.Minute)
		must(t, p.Sessions.PutGrant(ctx, &rg, l.Usage()))
		if !shared {
			l.Revoke()
		}
		revoked.Store(true)
		wg.Wait()
		w.Close()
		n := int64(0)
		must(t, p.Audit.ScanAudit(ctx, 0, func(_ uint64, data []byte) error {
			if strings.Contains(string(data), `"type":"call.allowed"`) && strings.Contains(string(data), g.ID) {
				n++
			}
			return nil
		}))
		if n != allowed.Load() {
			t.Errorf("the chain holds %d allowed records, %d calls were allowed", n, allowed.Load())
		}
	})
}
