package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// Duration accepts "10m"-style strings or a number of seconds.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", truncate(s, 32))
		}
		*d = Duration(v)
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil || n > 1e9 {
		return errors.New("duration must be a string like \"10m\" or a number of seconds")
	}
	*d = Duration(time.Duration(n * float64(time.Second)))
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type sessionRequest struct {
	TaskID         string            `json:"task_id"`
	TTL            Duration          `json:"ttl"`
	UntrustedInput *bool             `json:"untrusted_input"`
	Isolation      string            `json:"isolation"`
	BindCIDR       string            `json:"bind_cidr"`
	Labels         map[string]string `json:"labels"`
	Grants         []grantRequest    `json:"grants"`
}

type grantRequest struct {
	Upstream          string             `json:"upstream"`
	TTL               Duration           `json:"ttl"`
	MaxUses           int64              `json:"max_uses"`
	Approval          string             `json:"approval"`
	ApprovalsRequired int                `json:"approvals_required"`
	Budget            map[string]float64 `json:"budget"`
	Rules             []ruleRequest      `json:"rules"`
}

type ruleRequest struct {
	Method       string                       `json:"method"`
	Path         string                       `json:"path"`
	Action       string                       `json:"action"`
	Resource     string                       `json:"resource"`
	Irreversible *bool                        `json:"irreversible"`
	DenyUnknown  bool                         `json:"deny_unknown"`
	WebSocket    bool                         `json:"websocket"`
	Tool         string                       `json:"tool"`
	Constraints  map[string]constraintRequest `json:"constraints"`
}

type constraintRequest struct {
	Pin       json.RawMessage   `json:"pin,omitempty"`
	OneOf     []json.RawMessage `json:"one_of,omitempty"`
	Pattern   string            `json:"pattern,omitempty"`
	Min       *float64          `json:"min,omitempty"`
	Max       *float64          `json:"max,omitempty"`
	MaxLength *int              `json:"max_length,omitempty"`
	Required  bool              `json:"required,omitempty"`
}

func scalar(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch v.(type) {
	case string, bool, json.Number:
		return v, nil
	}
	return nil, errors.New("must be a string, number or boolean")
}

func (g grantRequest) spec(field string) (grants.Spec, error) {
	s := grants.Spec{
		Upstream: g.Upstream, TTL: time.Duration(g.TTL), MaxUses: g.MaxUses, Approval: g.Approval,
		ApprovalsRequired: g.ApprovalsRequired, Budget: g.Budget,
	}
	for i, r := range g.Rules {
		rule := grants.Rule{Method: r.Method, Path: r.Path, Action: r.Action, Resource: r.Resource,
			Irreversible: r.Irreversible, DenyUnknown: r.DenyUnknown, WebSocket: r.WebSocket, Tool: r.Tool}
		if len(r.Constraints) > 0 {
			rule.Constraints = map[string]grants.Constraint{}
		}
		for key, c := range r.Constraints {
			f := fmt.Sprintf("%srules[%d].constraints.%s", field, i, key)
			gc := grants.Constraint{Pattern: c.Pattern, Min: c.Min, Max: c.Max, MaxLength: c.MaxLength, Required: c.Required}
			if len(c.Pin) > 0 {
				v, err := scalar(c.Pin)
				if err != nil {
					return s, &fault.FieldError{Field: f + ".pin", Msg: err.Error()}
				}
				gc.Pin = v
			}
			for j, raw := range c.OneOf {
				v, err := scalar(raw)
				if err != nil {
					return s, &fault.FieldError{Field: fmt.Sprintf("%s.one_of[%d]", f, j), Msg: err.Error()}
				}
				gc.OneOf = append(gc.OneOf, v)
			}
			rule.Constraints[key] = gc
		}
		s.Rules = append(s.Rules, rule)
	}
	return s, nil
}

type ruleOfTwoJSON struct {
	UntrustedInput  bool   `json:"untrusted_input"`
	SensitiveAccess bool   `json:"sensitive_access"`
	ExternalAction  bool   `json:"external_action"`
	Gated           bool   `json:"gated"`
	Hint            string `json:"hint,omitempty"`
}

type sessionJSON struct {
	ID                string            `json:"id"`
	Token             string            `json:"token,omitempty"`
	AWSCredentials    *awsCredentials   `json:"aws_credentials,omitempty"`
	TaskID            string            `json:"task_id"`
	Status            string            `json:"status"`
	CreatedAt         time.Time         `json:"created_at"`
	ExpiresAt         time.Time         `json:"expires_at"`
	RevokedAt         *time.Time        `json:"revoked_at,omitempty"`
	CreatedBy         string            `json:"created_by"`
	UntrustedInput    bool              `json:"untrusted_input"`
	Isolation         string            `json:"isolation,omitempty"`
	RequiredIsolation string            `json:"required_isolation"`
	IsolationTooWeak  bool              `json:"isolation_too_weak"`
	BindCIDR          string            `json:"bind_cidr,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	RuleOfTwo         ruleOfTwoJSON     `json:"rule_of_two"`
	Grants            []grantJSON       `json:"grants"`
	Proxy             *proxyJSON        `json:"proxy,omitempty"`
	Placeholders      map[string]string `json:"placeholders,omitempty"`
}

// proxyJSON is how a sandbox reaches the proxy door (DESIGN §8): its URL
// (with the session token as the proxy password only in the creation
// answer, where the token is shown once) and the session's CA.
type proxyJSON struct {
	URL   string `json:"url,omitempty"`
	CAPEM string `json:"ca_pem"`
}

// awsCredentials let the stock AWS SDK or CLI sign for the broker.
type awsCredentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

type grantJSON struct {
	ID                string             `json:"id"`
	SessionID         string             `json:"session_id"`
	TaskID            string             `json:"task_id"`
	Upstream          string             `json:"upstream"`
	Status            string             `json:"status"`
	CreatedAt         time.Time          `json:"created_at"`
	ExpiresAt         time.Time          `json:"expires_at"`
	RevokedAt         *time.Time         `json:"revoked_at,omitempty"`
	MaxUses           int64              `json:"max_uses,omitempty"`
	Uses              int64              `json:"uses"`
	Approval          string             `json:"approval"`
	ApprovalsRequired int                `json:"approvals_required"`
	Budget            map[string]float64 `json:"budget,omitempty"`
	Spent             map[string]float64 `json:"spent,omitempty"`
	PendingUses       int64              `json:"pending_uses"`
	PendingSpent      map[string]float64 `json:"pending_spent,omitempty"`
	Rules             []ruleJSON         `json:"rules"`
}

type ruleJSON struct {
	Method       string                    `json:"method,omitempty"`
	Path         string                    `json:"path,omitempty"`
	Action       string                    `json:"action,omitempty"`
	Resource     string                    `json:"resource,omitempty"`
	Irreversible bool                      `json:"irreversible"`
	DenyUnknown  bool                      `json:"deny_unknown,omitempty"`
	WebSocket    bool                      `json:"websocket,omitempty"`
	Tool         string                    `json:"tool,omitempty"`
	Constraints  map[string]constraintJSON `json:"constraints,omitempty"`
}

type constraintJSON struct {
	Pin       any      `json:"pin,omitempty"`
	OneOf     []any    `json:"one_of,omitempty"`
	Pattern   string   `json:"pattern,omitempty"`
	Min       *float64 `json:"min,omitempty"`
	Max       *float64 `json:"max,omitempty"`
	MaxLength *int     `json:"max_length,omitempty"`
	Required  bool     `json:"required,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// sessionJSON is a session's answer with the proxy door's URL, when the
// session has a CA and the door's address is known.
func (s *Server) sessionJSON(v sessions.SessionView) sessionJSON {
	out := toSessionJSON(v)
	if addr := *s.proxyURL.Load(); out.Proxy != nil && addr != "" {
		u := url.URL{Scheme: "http", Host: addr}
		if v.Token != "" {
			u.User = url.UserPassword("airlock", v.Token)
		}
		out.Proxy.URL = u.String()
	}
	return out
}

func toSessionJSON(v sessions.SessionView) sessionJSON {
	s := v.Session
	out := sessionJSON{
		ID: s.ID, Token: v.Token, TaskID: s.TaskID, Status: v.Status, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt,
		RevokedAt: timePtr(s.RevokedAt), CreatedBy: s.CreatedBy, UntrustedInput: s.UntrustedInput,
		Isolation: s.Isolation.String(), RequiredIsolation: v.Required.String(), IsolationTooWeak: v.IsolationTooWeak,
		BindCIDR: s.BindCIDR, Labels: s.Labels,
		RuleOfTwo: ruleOfTwoJSON{UntrustedInput: v.RuleOfTwo.UntrustedInput, SensitiveAccess: v.RuleOfTwo.SensitiveAccess,
			ExternalAction: v.RuleOfTwo.ExternalAction, Gated: v.RuleOfTwo.Gated(), Hint: v.RuleOfTwo.Hint()},
		Grants: []grantJSON{},
	}
	if v.ProxyCAPEM != nil {
		out.Proxy = &proxyJSON{CAPEM: string(v.ProxyCAPEM)}
		out.Placeholders = s.Placeholders
	}
	if v.AWSSecret != "" {
		out.AWSCredentials = &awsCredentials{AccessKeyID: s.ID, SecretAccessKey: v.AWSSecret}
	}
	for _, g := range v.Grants {
		out.Grants = append(out.Grants, toGrantJSON(g))
	}
	return out
}

func toGrantJSON(v sessions.GrantView) grantJSON {
	g := v.Grant
	out := grantJSON{
		ID: g.ID, SessionID: g.SessionID, TaskID: g.TaskID, Upstream: g.Upstream, Status: v.Status,
		CreatedAt: g.CreatedAt, ExpiresAt: g.ExpiresAt, RevokedAt: timePtr(g.RevokedAt), MaxUses: g.MaxUses,
		Uses: v.Usage.Uses, Approval: g.Approval, ApprovalsRequired: g.ApprovalsRequired, Budget: g.Budget,
		Rules: []ruleJSON{},
	}
	if len(v.Usage.Spent) > 0 {
		out.Spent = v.Usage.Spent
	}
	out.PendingUses = v.Pending.Uses
	for k, x := range v.Pending.Spent {
		if x != 0 {
			if out.PendingSpent == nil {
				out.PendingSpent = map[string]float64{}
			}
			out.PendingSpent[k] = x
		}
	}
	for _, r := range g.Rules {
		rj := ruleJSON{Method: r.Method, Path: r.Path, Action: r.Action, Resource: r.Resource, Irreversible: r.IsIrreversible(), DenyUnknown: r.DenyUnknown, WebSocket: r.WebSocket, Tool: r.Tool}
		for k, c := range r.Constraints {
			if rj.Constraints == nil {
				rj.Constraints = map[string]constraintJSON{}
			}
			rj.Constraints[k] = constraintJSON{Pin: c.Pin, OneOf: c.OneOf, Pattern: c.Pattern, Min: c.Min, Max: c.Max, MaxLength: c.MaxLength, Required: c.Required}
		}
		out.Rules = append(out.Rules, rj)
	}
	return out
}

type listJSON[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeJSON reads one JSON object strictly (unknown fields refused, 1 MiB).
// The body is JSON whatever its Content-Type says (curl -d sends a form
// type); the control plane takes bearer tokens only, never cookies, so a
// cross-site form cannot reach it with credentials.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("%w: malformed JSON at offset %d", errBadRequestJSON, se.Offset)
		case errors.As(err, &te):
			return fmt.Errorf("%w: field %s must be %s", errBadRequestJSON, te.Field, te.Type)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("%w: empty body", errBadRequestJSON)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("%w: %s", errBadRequestJSON, strings.TrimPrefix(err.Error(), "json: "))
		}
		return fmt.Errorf("%w: %s", errBadRequestJSON, truncate(err.Error(), 200))
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", errBadRequestJSON)
	}
	return nil
}

func queryLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, fmt.Errorf("%w: limit must be 1..1000", errBadRequestJSON)
	}
	return n, nil
}
