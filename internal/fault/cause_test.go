package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
)

// TestCauseOf: a Cause's text is its alone (the error it explains is
// never printed through it), errors.Is reaches its kind's sentinel and
// what it explains, and CauseOf finds the cause of the kind that decides
// the answer, wrapped or joined, never one of another kind.
func TestCauseOf(t *testing.T) {
	upstreamErr := fault.Hidden(fault.UpstreamError, "upstream error")
	credential := fault.Hidden(fault.CredentialUnavailable, "credential unavailable")
	raw := errors.New(`dial tcp 10.0.0.7:443: lookup api.internal?key=SECRET: no such host`)
	refused := fault.Because(upstreamErr, "connection refused by the upstream", raw)
	tests := []struct {
		name       string
		err        error
		cause      string
		reason     string
		is         []error
		wantKindOf fault.Kind
	}{
		{name: "cause", err: refused, cause: "connection refused by the upstream", reason: "connection refused by the upstream",
			is: []error{upstreamErr, raw}, wantKindOf: fault.UpstreamError},
		{name: "wrapped", err: fmt.Errorf("file:/k: %w", fault.Because(credential, "the credential file does not exist", nil)),
			cause: "the credential file does not exist", reason: "the credential file does not exist", is: []error{credential}, wantKindOf: fault.CredentialUnavailable},
		{name: "joined with a refusal of higher precedence", err: errors.Join(fault.New(fault.SessionRevoked, "session revoked"), refused),
			cause: "", reason: "session revoked", is: []error{upstreamErr}, wantKindOf: fault.SessionRevoked},
		{name: "no cause", err: fmt.Errorf("%w: detail", upstreamErr), cause: "", reason: "upstream error", is: []error{upstreamErr}, wantKindOf: fault.UpstreamError},
		{name: "not a fault", err: raw, cause: "", reason: "internal error", wantKindOf: fault.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fault.CauseOf(tt.err); got != tt.cause {
				t.Errorf("CauseOf = %q, want %q", got, tt.cause)
			}
			if got := fault.Reason(tt.err); got != tt.reason {
				t.Errorf("Reason = %q, want %q", got, tt.reason)
			}
			for _, target := range tt.is {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v) = false", target)
				}
			}
			if got := fault.Of(tt.err); got != tt.wantKindOf {
				t.Errorf("Of = %v, want %v", got, tt.wantKindOf)
			}
		})
	}
	if refused.Error() != "connection refused by the upstream" {
		t.Errorf("a cause's text is %q", refused.Error())
	}
}
