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
	_, err := firstRule(now, live, upstream, c, func(_ *Live, _ *compiledRule, d *Decision) (int, error) {
		if len(d.Filled) > 0 {
			return rankViolation, &Violation{Param: d.Filled[0], Constraint: "pin", Msg: "must be sent with the pinned value for this permission"}
		}
		return 0, nil
	})
	return err
}
