package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/approval/web"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/config"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/upstream"
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
}

// Extra errors of the HTTP layer.
var (
	errBodyTooLarge   = errors.New("request body exceeds the upstream's max_body")
	errBodyStalled    = errors.New("the request body stopped arriving")
	errForbiddenRole  = errors.New("this token's role may not use this route")
	errMissingToken   = errors.New("missing bearer token")
	errMethod         = errors.New("method not allowed")
	errNotFoundRoute  = errors.New("no such route")
	errBadRequestJSON = errors.New("malformed request")
)

// codes is the one table from errors to status and problem code. Order
// matters: the first match wins. safe marks errors whose text may be shown
// (they name fields, parameters and constraints, never values or secrets).
var codes = []struct {
	err    error
	status int
	code   string
	title  string
	safe   bool
}{
	{errMissingToken, 401, "invalid_token", "Invalid token", true},
	{errProxyAuth, 401, "invalid_token", "Proxy authentication required", true},
	{errAWSSignature, 403, "invalid_token", "Invalid signature", false},
	{upstream.ErrSignature, 403, "invalid_token", "Invalid signature", false},
	{session.ErrInvalidToken, 401, "invalid_token", "Invalid token", false},
	{session.ErrWrongSource, 401, "invalid_token", "Invalid token", true},
	{auth.ErrInvalidToken, 401, "invalid_token", "Invalid token", false},
	{session.ErrExpired, 401, "session_expired", "Session expired", false},
	{session.ErrRevoked, 401, "session_revoked", "Session revoked", false},
	{broker.ErrKillswitch, 503, "killswitch_engaged", "Kill-switch engaged", true},
	{broker.ErrStale, 503, "broker_unavailable", "Broker unavailable", true},
	{broker.ErrRateLimited, 429, "rate_limited", "Rate limited", true},
	{broker.ErrTooManyPending, 429, "too_many_pending", "Too many pending actions", true},
	{grants.ErrNoMatchingGrant, 403, "no_matching_grant", "No matching grant", true},
	{grants.ErrConstraintViolated, 403, "constraint_violated", "Constraint violated", true},
	{grants.ErrGrantExpired, 403, "grant_expired", "Grant expired", true},
	{grants.ErrGrantRevoked, 403, "grant_revoked", "Grant revoked", true},
	{grants.ErrGrantExhausted, 403, "grant_exhausted", "Grant exhausted", true},
	{grants.ErrBudgetExceeded, 403, "budget_exceeded", "Budget exceeded", true},
	{broker.ErrActionDenied, 403, "approval_denied", "Approval denied", true},
	{broker.ErrActionExpired, 403, "approval_expired", "Approval expired", true},
	{broker.ErrActionFailed, 502, "upstream_error", "Approved action failed", true},
	{approval.ErrNotFound, 404, "not_found", "Not found", false},
	{approval.ErrExpired, 409, "approval_expired", "Approval expired", true},
	{approval.ErrDecided, 409, "conflict", "Already decided", true},
	{approval.ErrAlreadyDecided, 409, "conflict", "Already decided", true},
	{approval.ErrNotExecuted, 409, "conflict", "Not executed", true},
	{approval.ErrSelfApproval, 403, "forbidden", "Forbidden", true},
	{approval.ErrInvalidDecision, 400, "bad_request", "Bad request", true},
	{session.ErrIsolationWeak, 400, "isolation_too_weak", "Isolation too weak", true},
	{broker.ErrEgressDenied, 403, "egress_denied", "Egress denied", true},
	{errHostMismatch, 421, "bad_request", "Misdirected request", true},
	{errBodyTooLarge, 413, "bad_request", "Request body too large", true},
	{errBodyStalled, 408, "bad_request", "Request timeout", true},
	{grants.ErrBadRequest, 400, "bad_request", "Bad request", true},
	{errBadRequestJSON, 400, "bad_request", "Bad request", true},
	{broker.ErrUnknownUpstream, 404, "not_found", "Unknown upstream", true},
	{broker.ErrNoProxyCA, 404, "not_found", "Not found", true},
	{broker.ErrNotFound, 404, "not_found", "Not found", false},
	{errNotFoundRoute, 404, "not_found", "Not found", false},
	{errMethod, 405, "bad_request", "Method not allowed", false},
	{errForbiddenRole, 403, "forbidden", "Forbidden", true},
	{web.ErrLoginRequired, 403, "forbidden", "Not logged in", true},
	{web.ErrForgedForm, 403, "forbidden", "Refused", true},
	{web.ErrLoginRefused, 401, "invalid_token", "Invalid token", true},
	{web.ErrNotConfirmed, 400, "bad_request", "Not confirmed", true},
	{broker.ErrForbidden, 403, "forbidden", "Forbidden", true},
	{broker.ErrConflict, 409, "conflict", "Conflict", true},
	{upstream.ErrCredentialUnavailable, 503, "credential_unavailable", "Credential unavailable", false},
	{audit.ErrUnavailable, 503, "audit_unavailable", "Audit log unavailable", false},
	{broker.ErrUsageUnavailable, 503, "usage_unavailable", "Grant usage unavailable", false},
	{upstream.ErrTimeout, 504, "upstream_timeout", "Upstream timeout", false},
	{upstream.ErrUpstream, 502, "upstream_error", "Upstream error", false},
}

// problemFor maps err to its problem document.
func problemFor(err error) Problem {
	var fe *grants.FieldError
	if errors.As(err, &fe) {
		return Problem{Status: 400, Code: "bad_request", Title: "Bad request", Detail: fe.Error(), Field: fe.Field}
	}
	var cfe *config.FieldError
	if errors.As(err, &cfe) {
		return Problem{Status: 400, Code: "bad_request", Title: "Bad request", Detail: cfe.Error(), Field: cfe.Field}
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			p := Problem{Status: c.status, Code: c.code, Title: c.title, Detail: c.title}
			if c.safe {
				p.Detail = err.Error()
			}
			var v *grants.Violation
			if errors.As(err, &v) {
				p.Param, p.Constraint = v.Param, v.Constraint
			}
			return p
		}
	}
	return Problem{Status: 500, Code: "internal", Title: "Internal error", Detail: "internal error"}
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
