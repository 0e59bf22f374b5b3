package grants

import (
	"fmt"
	"time"
)

// Permit finds, as Evaluate does, a live grant rule of upstream that allows
// c, but reserves nothing: it is for a permission a call needs besides the
// one Evaluate reserved for it (an AWS copy's source, a header that sets an
// object's ACL); held is the grant that reserved the call's use (nil when
// none did). The call takes no further use, so another grant that limits
// its uses (max_uses, budget) permits nothing: only held may. The decision
// (its grant, its rule's irreversibility) gates the call like the main one
// (Broker.Gated). A rule
// that would have to fill in a pinned parameter does not permit: the
// request, as it will be sent, must already carry it. Releasing the
// decision is a no-op. Errors: ErrNoMatchingGrant, a *Violation
// (ErrConstraintViolated), ErrGrantExpired, ErrGrantExhausted.
func Permit(now time.Time, live []*Live, upstream string, c *Call, held *Live) (*Decision, error) {
	return firstRule(now, live, upstream, c, func(g *Live, r *compiledRule, d *Decision) (int, error) {
		if len(d.Filled) > 0 {
			return rankViolation, &Violation{Param: d.Filled[0], Constraint: "pin", Msg: "must be sent with the pinned value for this permission"}
		}
		if g != held && (g.Grant.MaxUses > 0 || len(g.Grant.Budget) > 0) {
			// Its count could not be kept exactly: a grant that limits its uses
			// permits only calls that it counts itself.
			return rankExhausted, fmt.Errorf("%w: a grant with max_uses or a budget permits only the calls it counts; send the operation on its own, or grant both in one grant", ErrGrantExhausted)
		}
		d.Grant, d.Rule, d.Irreversible = g, r.index, r.irreversible
		d.released = true // nothing reserved, nothing to give back
		return 0, nil
	})
}
