package grants

import "time"

// Permit reports whether a live grant of upstream has a rule that allows c,
// as Evaluate decides, but reserves nothing and counts no use: it is for a
// permission a call needs besides the one Evaluate reserved for it (an AWS
// copy's source, a header that sets an object's ACL). A rule that would
// have to fill in a pinned parameter does not permit: the request, as it
// will be sent, must already carry it. Errors: ErrNoMatchingGrant, a
// *Violation (ErrConstraintViolated), ErrGrantExpired.
func Permit(now time.Time, live []*Live, upstream string, c *Call) error {
	var firstErr error
	rank := 0 // 1 expired, 2 violation
	note := func(r int, err error) {
		if r > rank {
			rank, firstErr = r, err
		}
	}
	for _, g := range live {
		if g.Grant.Upstream != upstream || g.Revoked() {
			continue
		}
		expired := !now.Before(g.Grant.ExpiresAt)
		for _, r := range g.rules {
			if !r.matches(c) {
				continue
			}
			if expired {
				note(1, ErrGrantExpired)
				break
			}
			d, err := r.evaluate(c)
			if err != nil {
				note(2, err)
				continue
			}
			if len(d.Filled) > 0 {
				note(2, &Violation{Param: d.Filled[0], Constraint: "pin", Msg: "must be sent with the pinned value for this permission"})
				continue
			}
			return nil
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return ErrNoMatchingGrant
}
