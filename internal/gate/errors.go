package gate

import (
	"fmt"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/fault"
)

// Errors a sandbox sees about its gated calls.
var (
	// ErrTooManyPending refuses a gated call when its session already has
	// its limit of pending actions.
	ErrTooManyPending = fault.New(fault.TooManyPending, "the session has too many pending actions")
	ErrActionDenied   = fault.New(fault.ApprovalDenied, "the reviewer denied this action")
	ErrActionExpired  = fault.New(fault.ApprovalExpired, "the action expired before a decision")
	ErrActionFailed   = fault.New(fault.ActionFailed, "the approved action could not be executed")
)

// ActionError maps a terminal, unsuccessful action to the sandbox's error
// (a failed one's text says its reason).
func ActionError(a approval.Action) error {
	switch a.Status {
	case approval.Denied:
		return fmt.Errorf("%w: %s", ErrActionDenied, a.Reason)
	case approval.Expired:
		return ErrActionExpired
	case approval.Failed:
		code := ""
		if a.Result != nil {
			code = a.Result.Code
		}
		err := fmt.Errorf("%w (%s)", ErrActionFailed, code)
		if a.Reason != "" {
			// The failure's reason is the broker's own (reasonOf): shown.
			return fault.Because(err, ErrActionFailed.Msg+": "+a.Reason, nil)
		}
		return err
	}
	return nil
}
