// Package session holds sandbox sessions, their JWT tokens, and the
// Rule-of-Two and isolation-tier derivation.
package session

import (
	"net/netip"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// Errors of token verification and session state.
var (
	ErrInvalidToken  = fault.Hidden(fault.InvalidToken, "invalid token")
	ErrExpired       = fault.Hidden(fault.SessionExpired, "session expired")
	ErrRevoked       = fault.Hidden(fault.SessionRevoked, "session revoked")
	ErrWrongSource   = fault.New(fault.InvalidToken, "token not valid from this address")
	ErrIsolationWeak = fault.New(fault.IsolationTooWeak, "declared isolation is weaker than required")
)

// Isolation is a sandbox isolation tier, ordered from weakest to strongest.
type Isolation int

// Isolation tiers.
const (
	IsolationUnknown Isolation = iota
	IsolationProcess
	IsolationContainer
	IsolationGVisor
	IsolationMicroVM
)

var isolationNames = []string{"", "process", "container", "gvisor", "microvm"}

func (i Isolation) String() string {
	if i < 0 || int(i) >= len(isolationNames) {
		return ""
	}
	return isolationNames[i]
}

// ParseIsolation reads a tier name; "" is IsolationUnknown.
func ParseIsolation(s string) (Isolation, bool) {
	for i, n := range isolationNames {
		if n == s {
			return Isolation(i), true
		}
	}
	return IsolationUnknown, false
}

// Session is one sandbox run for one task.
type Session struct {
	ID             string
	TaskID         string
	TokenID        string // the jti of the one token issued for it
	CreatedAt      time.Time
	ExpiresAt      time.Time
	RevokedAt      time.Time
	UntrustedInput bool
	Isolation      Isolation
	BindCIDR       string // "" or a CIDR prefix
	Labels         map[string]string
	CreatedBy      string // the control-plane identity that created it
	// ProxyCA is the session's own CA for the proxy door (DESIGN §8), nil
	// when the door was off at its creation.
	ProxyCA *ProxyCA
	// Placeholders are the tokens, shaped like the real credentials and
	// worth nothing, that sandbox clients which insist on a token are given
	// (environment variable name → value); minted at creation.
	Placeholders map[string]string
	// Traceparent is the operator's W3C trace context at the session's
	// creation (the traceparent header of POST /v1/sessions, normalized),
	// or "": every call of the session's span links to it.
	Traceparent string
}

// ProxyCA is a session's CA at rest: its certificate (public) and its
// private key sealed under the installation key, bound to the session id
// (see proxyca.Sealer). The key is never stored or shown unsealed.
type ProxyCA struct {
	CertDER   []byte
	SealedKey []byte
}

// Bind parses BindCIDR; ok is false when the session is not bound.
func (s *Session) Bind() (netip.Prefix, bool) {
	if s.BindCIDR == "" {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s.BindCIDR)
	return p, err == nil
}

// RuleOfTwo is the session's standing under Meta's Agents Rule of Two.
type RuleOfTwo struct {
	UntrustedInput  bool // A
	SensitiveAccess bool // B
	ExternalAction  bool // C
}

// Gated reports A∧B∧C: every irreversible call needs a human.
func (r RuleOfTwo) Gated() bool {
	return r.UntrustedInput && r.SensitiveAccess && r.ExternalAction
}

// RequiredIsolation is the weakest tier acceptable for the session
// (seeds 000 and 004): process when none of A, B, C holds; microvm for A∧B;
// gvisor when A holds without B; container for every other mix.
func (r RuleOfTwo) RequiredIsolation() Isolation {
	switch {
	case r.UntrustedInput && r.SensitiveAccess:
		return IsolationMicroVM
	case r.UntrustedInput:
		return IsolationGVisor
	case r.SensitiveAccess || r.ExternalAction:
		return IsolationContainer
	}
	return IsolationProcess
}

// Hint tells an operator how to split a session that holds all three
// properties, or "" when it does not.
func (r RuleOfTwo) Hint() string {
	if !r.Gated() {
		return ""
	}
	return "This session holds untrusted input, sensitive access and an irreversible action at once, " +
		"so every irreversible call waits for a human reviewer. To run autonomously, split the task: " +
		"read untrusted content in a session without sensitive grants, and perform the action in a " +
		"session created with untrusted_input=false or without irreversible rules."
}
