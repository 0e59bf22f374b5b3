package killswitch

import "context"

// period is one period of the switch being released: its context is
// cancelled (with cause ErrEngaged) when the switch is engaged, and a
// release starts a new period.
type period struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newPeriod(engaged bool) *period {
	ctx, cancel := context.WithCancelCause(context.Background())
	if engaged {
		cancel(ErrEngaged)
	}
	return &period{ctx: ctx, cancel: cancel}
}

// Period returns the context of the current period: it is cancelled, with
// cause ErrEngaged, when the switch is engaged (already, if it is). Work
// bound to it (broker.Bound) ends then.
func (s *Service) Period() context.Context { return s.period.Load().ctx }
