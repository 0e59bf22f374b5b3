package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
)

// Problem is an RFC 9457 problem document with Airlock's stable code.
type Problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Code       string `json:"code"`
	RequestID  string `json:"request_id,omitempty"`
	Field      string `json:"field,omitempty"`
	Param      string `json:"param,omitempty"`
	Constraint string `json:"constraint,omitempty"`

	kind fault.Kind // what decided it (for the doors that answer in another protocol)
}

// Extra errors of the HTTP layer.
var (
	errBodyTooLarge   = fault.New(fault.BodyTooLarge, "request body exceeds the upstream's max_body")
	errBodyStalled    = fault.New(fault.RequestTimeout, "the request body stopped arriving")
	errForbiddenRole  = fault.New(fault.Forbidden, "this token's role may not use this route")
	errMissingToken   = fault.New(fault.InvalidToken, "missing bearer token")
	errMethod         = fault.Hidden(fault.MethodNotAllowed, "method not allowed")
	errNotFoundRoute  = fault.Hidden(fault.NotFound, "no such route")
	errBadRequestJSON = fault.New(fault.BadRequest, "malformed request")
)

// titles are the problems' titles, one per code (RFC 9457: a title is the
// type's, not the occurrence's).
var titles = map[string]string{
	"internal": "Internal error", "invalid_token": "Invalid token", "session_expired": "Session expired",
	"session_revoked": "Session revoked", "killswitch_engaged": "Kill-switch engaged", "broker_unavailable": "Broker unavailable",
	"rate_limited": "Rate limited", "too_many_pending": "Too many pending actions", "no_matching_grant": "No matching grant",
	"constraint_violated": "Constraint violated", "grant_expired": "Grant expired", "grant_revoked": "Grant revoked",
	"grant_exhausted": "Grant exhausted", "budget_exceeded": "Budget exceeded", "approval_denied": "Approval denied",
	"approval_expired": "Approval expired", "conflict": "Conflict", "forbidden": "Forbidden", "bad_request": "Bad request",
	"isolation_too_weak": "Isolation too weak", "egress_denied": "Egress denied", "not_found": "Not found",
	"credential_unavailable": "Credential unavailable", "audit_unavailable": "Audit log unavailable",
	"usage_unavailable": "Grant usage unavailable", "upstream_timeout": "Upstream timeout", "upstream_error": "Upstream error",
	"tool_changed": "Tool changed", "server_request_blocked": "Server request blocked",
}

// kindTitles are the titles of the kinds that share a code with others
// but say more (a signature, a method, a body too large): the title, and
// a private error's detail, of those kinds.
var kindTitles = map[fault.Kind]string{
	fault.ProxyAuthRequired: "Proxy authentication required", fault.InvalidSignature: "Invalid signature",
	fault.ActionFailed: "Approved action failed", fault.Misdirected: "Misdirected request",
	fault.BodyTooLarge: "Request body too large", fault.RequestTimeout: "Request timeout",
	fault.MethodNotAllowed: "Method not allowed",
}

// problemFor maps err to its problem document: the status and code of its
// kind (see fault.Find), its text as the detail unless it is private; a
// private error's detail is its safe cause (fault.CauseOf: "connection
// refused by the upstream"), else its title.
func problemFor(err error) Problem {
	var fe *fault.FieldError
	if errors.As(err, &fe) {
		return Problem{Status: 400, Code: "bad_request", Title: titles["bad_request"], Detail: fe.Error(), Field: fe.Field, kind: fault.BadRequest}
	}
	f := fault.Find(err)
	if f == nil {
		return Problem{Status: 500, Code: "internal", Title: titles["internal"], Detail: "internal error"}
	}
	code := f.Kind.Code()
	title := titles[code]
	if t, ok := kindTitles[f.Kind]; ok {
		title = t
	}
	p := Problem{Status: f.Kind.Status(), Code: code, Title: title, Detail: title, kind: f.Kind}
	switch {
	case !f.Private:
		p.Detail = err.Error()
	case fault.CauseOf(err) != "":
		p.Detail = fault.CauseOf(err) // what kind of failure it was, in a fixed phrase
	}
	var v *grants.Violation
	if errors.As(err, &v) {
		p.Param, p.Constraint = v.Param, v.Constraint
	}
	return p
}

func writeProblem(w http.ResponseWriter, p Problem, requestID string) {
	p.Type = "urn:airlock:problem:" + p.Code
	p.RequestID = requestID
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Airlock-Code", p.Code) // a broker refusal, told apart from an upstream's own error
	if p.Status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
