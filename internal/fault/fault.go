// Package fault is Airlock's one error kind. Every refusal or failure the
// broker answers is an *Error of a Kind (the stable problem codes of the
// API, with the few statuses a code has more than one of); each writer
// (the problem documents, the AWS door's errors, the MCP door's JSON-RPC
// errors) maps a Kind once. Sentinels of every package are *Error values,
// so errors.Is matches them as before and Find names the kind of any
// wrapped or joined error.
package fault

import (
	"errors"
	"fmt"
)

// Kind is what went wrong, as the caller is told. The order is precedence:
// when an error carries several kinds (a refusal joined with its cause),
// the first in this order is the one answered.
type Kind uint8

// The kinds, in precedence order.
const (
	Internal              Kind = iota // 500 internal: nothing else matched
	InvalidToken                      // 401 invalid_token
	ProxyAuthRequired                 // 401 invalid_token (the proxy door answers 407)
	InvalidSignature                  // 403 invalid_token: a SigV4 signature that does not verify
	SessionExpired                    // 401 session_expired
	SessionRevoked                    // 401 session_revoked
	KillswitchEngaged                 // 503 killswitch_engaged
	BrokerUnavailable                 // 503 broker_unavailable: a replica that cannot confirm it is current
	RateLimited                       // 429 rate_limited
	TooManyPending                    // 429 too_many_pending
	NoMatchingGrant                   // 403 no_matching_grant
	ConstraintViolated                // 403 constraint_violated
	ToolChanged                       // 409 tool_changed: an MCP tool differs from its pinned digest (quarantined)
	GrantExpired                      // 403 grant_expired
	GrantRevoked                      // 403 grant_revoked
	GrantExhausted                    // 403 grant_exhausted
	BudgetExceeded                    // 403 budget_exceeded
	ApprovalDenied                    // 403 approval_denied
	ApprovalExpired                   // 403 approval_expired: the held call's action expired
	ActionFailed                      // 502 upstream_error: an approved action could not be executed
	DecidedTooLate                    // 409 approval_expired: a decision on an expired action
	Conflict                          // 409 conflict
	Forbidden                         // 403 forbidden
	IsolationTooWeak                  // 400 isolation_too_weak
	EgressDenied                      // 403 egress_denied
	Misdirected                       // 421 bad_request: a request for another host than its tunnel's
	BodyTooLarge                      // 413 bad_request
	RequestTimeout                    // 408 bad_request: the request body stopped arriving
	BadRequest                        // 400 bad_request
	NotFound                          // 404 not_found
	MethodNotAllowed                  // 405 bad_request
	CredentialUnavailable             // 503 credential_unavailable
	AuditUnavailable                  // 503 audit_unavailable
	UsageUnavailable                  // 503 usage_unavailable
	UpstreamTimeout                   // 504 upstream_timeout
	ServerRequestBlocked              // 502 server_request_blocked: an MCP server asked the client (sampling, elicitation, roots), never relayed
	UpstreamError                     // 502 upstream_error
	kinds                             // the number of kinds
)

var table = [kinds]struct {
	code   string
	status int
}{
	Internal: {"internal", 500}, InvalidToken: {"invalid_token", 401}, ProxyAuthRequired: {"invalid_token", 401},
	InvalidSignature: {"invalid_token", 403}, SessionExpired: {"session_expired", 401}, SessionRevoked: {"session_revoked", 401},
	KillswitchEngaged: {"killswitch_engaged", 503}, BrokerUnavailable: {"broker_unavailable", 503},
	RateLimited: {"rate_limited", 429}, TooManyPending: {"too_many_pending", 429},
	NoMatchingGrant: {"no_matching_grant", 403}, ConstraintViolated: {"constraint_violated", 403}, ToolChanged: {"tool_changed", 409},
	GrantExpired: {"grant_expired", 403}, GrantRevoked: {"grant_revoked", 403}, GrantExhausted: {"grant_exhausted", 403},
	BudgetExceeded: {"budget_exceeded", 403}, ApprovalDenied: {"approval_denied", 403}, ApprovalExpired: {"approval_expired", 403},
	ActionFailed: {"upstream_error", 502}, DecidedTooLate: {"approval_expired", 409}, Conflict: {"conflict", 409},
	Forbidden: {"forbidden", 403}, BadRequest: {"bad_request", 400}, IsolationTooWeak: {"isolation_too_weak", 400},
	EgressDenied: {"egress_denied", 403}, Misdirected: {"bad_request", 421}, BodyTooLarge: {"bad_request", 413},
	RequestTimeout: {"bad_request", 408}, MethodNotAllowed: {"bad_request", 405}, NotFound: {"not_found", 404},
	CredentialUnavailable: {"credential_unavailable", 503}, AuditUnavailable: {"audit_unavailable", 503},
	UsageUnavailable: {"usage_unavailable", 503}, UpstreamTimeout: {"upstream_timeout", 504}, UpstreamError: {"upstream_error", 502},
	ServerRequestBlocked: {"server_request_blocked", 502},
}

// Code is the kind's stable problem code (DESIGN §3).
func (k Kind) Code() string {
	if k >= kinds {
		return table[Internal].code
	}
	return table[k].code
}

// Status is the HTTP status the kind is answered with.
func (k Kind) Status() int {
	if k >= kinds {
		return table[Internal].status
	}
	return table[k].status
}

// String is the kind's code.
func (k Kind) String() string { return k.Code() }

// KindOf is the kind of a stored code (an action's result), the first kind
// in precedence order that answers it; Internal when none does.
func KindOf(code string) Kind {
	for k := Internal + 1; k < kinds; k++ {
		if table[k].code == code {
			return k
		}
	}
	return Internal
}

// Error is an error of a Kind. Msg is its text; Err, when set, is its
// cause (errors.Is and errors.As reach it). A Private error's text is not
// shown to the caller (the problem's detail is its title): its text, or
// the text of what it is joined with, may name what the caller must not
// learn.
type Error struct {
	Kind    Kind
	Msg     string
	Err     error
	Private bool
}

// New is an error of kind k whose text may be shown to the caller.
func New(k Kind, msg string) *Error { return &Error{Kind: k, Msg: msg} }

// Hidden is an error of kind k whose text is not shown to the caller.
func Hidden(k Kind, msg string) *Error { return &Error{Kind: k, Msg: msg, Private: true} }

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	if e.Msg == "" {
		return e.Err.Error()
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Find is the *Error of err that decides its answer: of those err carries
// (wrapped or joined, at any depth), the one of the first kind in
// precedence order (the outermost of equal kinds); nil when it carries none.
func Find(err error) *Error {
	var best *Error
	walk(err, func(e *Error) {
		if best == nil || e.Kind < best.Kind {
			best = e
		}
	})
	return best
}

// Of is the kind of err (Internal when it carries none).
func Of(err error) Kind {
	if e := Find(err); e != nil {
		return e.Kind
	}
	return Internal
}

// Is reports whether err carries an error of kind k.
func Is(err error, k Kind) bool {
	found := false
	walk(err, func(e *Error) { found = found || e.Kind == k })
	return found
}

func walk(err error, visit func(*Error)) {
	for err != nil {
		if e, ok := err.(*Error); ok {
			visit(e)
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x, visit)
			}
			return
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return
		}
	}
}

// As is errors.As for *Error (the outermost one), for callers that want
// the error itself rather than its kind.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// FieldError is a bad request, or a bad configuration, that names its
// field: a grant's (grants[0].rules[1].path), a config file's
// (upstreams[0].base_url). Its text is shown.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes a FieldError a bad request.
func (e *FieldError) Unwrap() error { return errFieldBadRequest }

var errFieldBadRequest = New(BadRequest, "bad request")

// Field is a required field of a service's Config, and whether it was left
// unset (see Required).
type Field struct {
	Name  string
	Unset bool
}

// Required names every field left unset, joined: "owner: Config.Name is
// required" each (a constructor refuses to build a half-made service).
func Required(owner string, fields ...Field) error {
	var errs []error
	for _, f := range fields {
		if f.Unset {
			errs = append(errs, fmt.Errorf("%s: Config.%s is required", owner, f.Name))
		}
	}
	return errors.Join(errs...)
}
