package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The control plane's operations beyond sessions and grants (client.go).
// Each names its api/openapi.yaml operationId; TestClientsCoverEveryOperation
// checks that together they cover the spec. Answers the Go types here do not
// model are returned as json.RawMessage (the shapes are api/openapi.yaml's).

// SessionPage is a page of sessions; Next is the cursor of the next page
// ("" at the end).
type SessionPage struct {
	Items []Session `json:"items"`
	Next  string    `json:"next,omitempty"`
}

// ListSessions lists sessions in creation order, a page at a time (limit 0:
// the broker's default).
//
// operationId: listSessions
func (c *Client) ListSessions(ctx context.Context, cursor string, limit int) (*SessionPage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var p SessionPage
	if err := c.Do(ctx, http.MethodGet, "/v1/sessions"+query(q), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Grant gets a grant with its usage.
//
// operationId: getGrant
func (c *Client) Grant(ctx context.Context, id string) (*Grant, error) {
	var g Grant
	if err := c.Do(ctx, http.MethodGet, "/v1/grants/"+url.PathEscape(id), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Token is an API token; Secret (the token itself) only in CreateToken's answer.
type Token struct {
	ID        string    `json:"id"`
	Secret    string    `json:"token,omitempty"`
	Role      string    `json:"role"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitempty"`
	CreatedBy string    `json:"created_by,omitempty"`
	AuditID   string    `json:"audit_id,omitempty"`
}

// CreateToken creates an API token (admin); ttl "" is the broker's default.
//
// operationId: createToken
func (c *Client) CreateToken(ctx context.Context, role, name, ttl string) (*Token, error) {
	in := map[string]string{"role": role, "name": name}
	if ttl != "" {
		in["ttl"] = ttl
	}
	var t Token
	if err := c.Do(ctx, http.MethodPost, "/v1/tokens", in, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Tokens lists the API tokens, without secrets.
//
// operationId: listTokens
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	var out struct{ Items []Token }
	if err := c.Do(ctx, http.MethodGet, "/v1/tokens", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// RevokeToken revokes an API token at once.
//
// operationId: revokeToken
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil)
}

// Approvals lists actions, newest first; status "" is every status.
//
// operationId: listApprovals
func (c *Client) Approvals(ctx context.Context, status string, limit int) ([]json.RawMessage, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct{ Items []json.RawMessage }
	if err := c.Do(ctx, http.MethodGet, "/v1/approvals"+query(q), nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Approval gets one action as a reviewer sees it.
//
// operationId: getApproval
func (c *Client) Approval(ctx context.Context, id string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.Do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Approve approves an action; the approval that reaches its quorum executes it.
//
// operationId: approveAction
func (c *Client) Approve(ctx context.Context, id, comment string) (json.RawMessage, error) {
	return c.decide(ctx, id, "approve", comment)
}

// Deny denies an action; it can never run.
//
// operationId: denyAction
func (c *Client) Deny(ctx context.Context, id, comment string) (json.RawMessage, error) {
	return c.decide(ctx, id, "deny", comment)
}

func (c *Client) decide(ctx context.Context, id, verdict, comment string) (json.RawMessage, error) {
	in := map[string]string{}
	if comment != "" {
		in["comment"] = comment
	}
	var out json.RawMessage
	err := c.Do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verdict, in, &out)
	return out, err
}

// Killswitch is the global kill-switch's state.
type Killswitch struct {
	Engaged bool      `json:"engaged"`
	Since   time.Time `json:"since,omitempty"`
	By      string    `json:"by,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// KillswitchStatus reads the kill-switch.
//
// operationId: getKillswitch
func (c *Client) KillswitchStatus(ctx context.Context) (*Killswitch, error) {
	return c.killswitch(ctx, http.MethodGet, nil)
}

// EngageKillswitch refuses every sandbox call until an admin releases it.
//
// operationId: engageKillswitch
func (c *Client) EngageKillswitch(ctx context.Context, reason string) (*Killswitch, error) {
	return c.killswitch(ctx, http.MethodPost, map[string]string{"reason": reason})
}

// ReleaseKillswitch releases the kill-switch (admin).
//
// operationId: releaseKillswitch
func (c *Client) ReleaseKillswitch(ctx context.Context) (*Killswitch, error) {
	return c.killswitch(ctx, http.MethodDelete, nil)
}

func (c *Client) killswitch(ctx context.Context, method string, in any) (*Killswitch, error) {
	var k Killswitch
	if err := c.Do(ctx, method, "/v1/killswitch", in, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ExportAudit streams the audit log to w; q holds the filters and format of
// GET /v1/audit (since, until, session_id, task_id, grant_id, type,
// from_seq, format).
//
// operationId: exportAudit
func (c *Client) ExportAudit(ctx context.Context, q url.Values, w io.Writer) error {
	return c.Stream(ctx, "/v1/audit"+query(q), w)
}

// PruneAudit removes the records older than before (admin); the answer has
// the count and the anchoring checkpoint.
//
// operationId: pruneAudit
func (c *Client) PruneAudit(ctx context.Context, before time.Time) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.Do(ctx, http.MethodDelete, "/v1/audit?before="+url.QueryEscape(before.UTC().Format(time.RFC3339Nano)), nil, &out)
	return out, err
}

// VerifyAudit verifies the hash chain and every checkpoint on the server.
//
// operationId: verifyAudit
func (c *Client) VerifyAudit(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.Do(ctx, http.MethodGet, "/v1/audit/verify", nil, &out)
	return out, err
}

// Checkpoints lists the signed checkpoints of the chain head.
//
// operationId: listCheckpoints
func (c *Client) Checkpoints(ctx context.Context) ([]json.RawMessage, error) {
	var out struct{ Items []json.RawMessage }
	if err := c.Do(ctx, http.MethodGet, "/v1/audit/checkpoints", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// AuditPublicKey is the Ed25519 key that verifies checkpoints, base64.
//
// operationId: getAuditPublicKey
func (c *Client) AuditPublicKey(ctx context.Context) (string, error) {
	var out struct {
		PublicKey string `json:"public_key"`
	}
	err := c.Do(ctx, http.MethodGet, "/v1/audit/public-key", nil, &out)
	return out.PublicKey, err
}

// Health is GET /healthz (on whichever plane Addr names).
//
// operationId: getHealth
func (c *Client) Health(ctx context.Context) error {
	return c.Do(ctx, http.MethodGet, "/healthz", nil, nil)
}

// Readiness is GET /readyz's answer.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// Ready reads /readyz; a broker that is not ready answers 503 with its
// checks, returned here without an error.
//
// operationId: getReadiness
func (c *Client) Ready(ctx context.Context) (*Readiness, error) {
	var buf bytes.Buffer
	err := c.Stream(ctx, "/readyz", &buf)
	if p, ok := err.(*Problem); ok && p.Status == http.StatusServiceUnavailable && p.Code == "http_error" {
		buf.Reset()
		buf.WriteString(p.Detail)
	} else if err != nil {
		return nil, err
	}
	var r Readiness
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Metrics is the Prometheus text of /metrics.
//
// operationId: getMetrics
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var buf bytes.Buffer
	err := c.Stream(ctx, "/metrics", &buf)
	return buf.Bytes(), err
}

// Profile is one of Go's profiles (debug: {pprof: true}, admin), e.g.
// "heap" or "profile?seconds=5".
//
// operationId: getProfile
func (c *Client) Profile(ctx context.Context, path string, w io.Writer) error {
	return c.Stream(ctx, "/debug/pprof/"+path, w)
}

func query(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}
