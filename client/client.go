// Package client is a small Go client for Airlock's control plane, used by
// the broker CLI and importable by orchestrators.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to the control plane with a bearer token.
type Client struct {
	Addr  string // e.g. http://127.0.0.1:8701
	Token string
	HTTP  *http.Client
}

// New makes a client; addr may omit the scheme.
func New(addr, token string) *Client {
	return &Client{Addr: baseURL(addr), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// baseURL is addr with a scheme (http:// when it has none) and no
// trailing slash.
func baseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/")
}

// Problem is an RFC 9457 error answered by the broker.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
	Field     string `json:"field"`
	// Param and Constraint name the parameter and the constraint a
	// constraint_violated refusal is about.
	Param      string `json:"param,omitempty"`
	Constraint string `json:"constraint,omitempty"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
}

// Do sends a JSON request and decodes the answer into out (which may be a
// *json.RawMessage, or nil). A problem answer is returned as *Problem.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Addr+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return problemOf(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Stream sends a GET and copies the raw answer to w (audit exports).
func (c *Client) Stream(ctx context.Context, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := *c.HTTP
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return problemOf(resp)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// problemOf reads a broker's error answer: its problem document, the code
// from X-Airlock-Code when the body has none, "http_error" when neither
// (a proxy in between).
func problemOf(resp *http.Response) *Problem {
	p := &Problem{Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(data, p) != nil || p.Code == "" {
		p.Code, p.Detail = resp.Header.Get("X-Airlock-Code"), strings.TrimSpace(string(data))
		if p.Code == "" {
			p.Code = "http_error"
		}
	}
	p.Status = resp.StatusCode
	return p
}

// RuleOfTwo is a session's standing.
type RuleOfTwo struct {
	UntrustedInput  bool   `json:"untrusted_input"`
	SensitiveAccess bool   `json:"sensitive_access"`
	ExternalAction  bool   `json:"external_action"`
	Gated           bool   `json:"gated"`
	Hint            string `json:"hint,omitempty"`
}

// Session is the part of a session answer most callers need; use Do with a
// json.RawMessage for all of it.
type Session struct {
	ID                string    `json:"id"`
	Token             string    `json:"token,omitempty"`
	TaskID            string    `json:"task_id"`
	Status            string    `json:"status"`
	ExpiresAt         time.Time `json:"expires_at"`
	RequiredIsolation string    `json:"required_isolation"`
	RuleOfTwo         RuleOfTwo `json:"rule_of_two"`
	Grants            []Grant   `json:"grants"`
	// Proxy is how a sandbox reaches the proxy door, when the session was
	// created with it on; Placeholders are its placeholder tokens.
	Proxy        *Proxy            `json:"proxy,omitempty"`
	Placeholders map[string]string `json:"placeholders,omitempty"`
	// AWSCredentials is the pair the stock AWS SDK signs with, only in the
	// creation answer of a session with a grant on an aws upstream.
	AWSCredentials *AWSCredentials `json:"aws_credentials,omitempty"`
}

// AWSCredentials are a session's credentials for the AWS door: worth
// nothing anywhere but at this broker, for this session.
type AWSCredentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

// Proxy is the proxy door of a session (DESIGN §8): its URL (with the
// session token as the proxy password only in the creation answer) and
// the session's CA certificate, PEM.
type Proxy struct {
	URL   string `json:"url,omitempty"`
	CAPEM string `json:"ca_pem"`
}

// Grant is the part of a grant answer most callers need.
type Grant struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Upstream  string    `json:"upstream"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	Uses      int64     `json:"uses"`
}

// CreateSession posts a session request (the JSON shape of POST /v1/sessions).
//
// operationId: createSession
func (c *Client) CreateSession(ctx context.Context, req any) (*Session, error) {
	var s Session
	if err := c.Do(ctx, http.MethodPost, "/v1/sessions", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Session gets a session.
//
// operationId: getSession
func (c *Client) Session(ctx context.Context, id string) (*Session, error) {
	var s Session
	if err := c.Do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SessionCA gets the PEM of a session's CA certificate (GET
// /v1/sessions/{id}/ca.pem); a session without one is a 404 *Problem.
//
// operationId: getSessionCA
func (c *Client) SessionCA(ctx context.Context, id string) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.Stream(ctx, "/v1/sessions/"+url.PathEscape(id)+"/ca.pem", &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// KillSession ends a session at once.
//
// operationId: killSession
func (c *Client) KillSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	if err := c.Do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// AddGrant attaches a grant (the JSON shape of one grant) to a session.
//
// operationId: addGrant
func (c *Client) AddGrant(ctx context.Context, sessionID string, grant any) (*Grant, error) {
	var g Grant
	if err := c.Do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(sessionID)+"/grants", grant, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// RevokeGrant revokes a grant at once.
//
// operationId: revokeGrant
func (c *Client) RevokeGrant(ctx context.Context, id string) (*Grant, error) {
	var g Grant
	if err := c.Do(ctx, http.MethodDelete, "/v1/grants/"+url.PathEscape(id), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}
