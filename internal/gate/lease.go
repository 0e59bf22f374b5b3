package gate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
)

// leaseOver reports whether an executing action's claim has ended (a claim
// without a lease, from a store that keeps none, never ends by time).
func (s *Service) leaseOver(a approval.Action) bool {
	return !a.LeaseUntil.IsZero() && !s.now().Before(a.LeaseUntil)
}

// renewLease renews action id's claim every third of the lease until the
// returned stop is called (before the outcome is stored).
func (s *Service) renewLease(id string) (stop func()) {
	var (
		mu      sync.Mutex
		t       interface{ Stop() bool }
		stopped bool
	)
	var arm func()
	arm = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		t = s.clock.AfterFunc(s.lease/3, func() {
			_, err := s.store.UpdateAction(context.Background(), id, func(a *approval.Action) error {
				if a.Status != approval.Executing || a.Owner != s.replica {
					return errUnchanged
				}
				a.LeaseUntil = s.now().UTC().Add(s.lease)
				return nil
			})
			if errors.Is(err, errUnchanged) {
				return // no longer ours to renew
			}
			if err != nil {
				s.log.Error("renew an executing action's lease", "action_id", id, "err", err)
			}
			arm()
		})
	}
	arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if t != nil {
			t.Stop()
		}
	}
}

// failExecuting fails an action left executing: its outcome is unknown and
// it is never sent again. Unless always, only when its lease has ended
// (row-locked: one replica wins, and records it once).
func (s *Service) failExecuting(id string, always bool, reason string) {
	a, err := s.store.UpdateAction(context.Background(), id, func(a *approval.Action) error {
		if a.Status != approval.Executing || !always && !s.leaseOver(*a) {
			return errUnchanged
		}
		a.Status, a.Reason = approval.Failed, reason
		a.Result = &approval.Result{Code: fault.UpstreamError.Code(), ExecutedAt: s.now().UTC()}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errUnchanged) {
			s.log.Error("fail an action left executing", "action_id", id, "err", err)
		}
		return
	}
	s.recordAction(a, typeActionFailed, audit.Actor{Kind: "system"}, reason)
	s.announce(a, typeActionFailed, "")
}

// sweepEvery is how often a replica sharing the store looks for executing
// actions whose lease ended (their owner died).
func (s *Service) sweepEvery() time.Duration { return max(s.lease/3, time.Second) }

// StartSweep starts failing, on this replica's clock, the executing
// actions whose lease ended, whichever replica claimed them.
func (s *Service) StartSweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.closed {
		return
	}
	s.sweepTimer = s.clock.AfterFunc(s.sweepEvery(), func() {
		s.sweep()
		s.StartSweep()
	})
}

// sweep fails the executing actions whose lease ended.
func (s *Service) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	executing, err := s.store.Actions(ctx, approval.Executing, 0)
	if err != nil {
		s.log.Error("list executing actions", "err", err)
		return
	}
	for _, a := range executing {
		if s.leaseOver(a) {
			s.failExecuting(a.ID, false,
				"the replica executing it stopped renewing its claim; the outcome is unknown and the request is not sent again")
		}
	}
}
