package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Sandbox is a sandbox's side of the broker: its calls through the REST door
// and its gated actions, on the sandbox plane, with the session token.
type Sandbox struct {
	Addr  string // the sandbox plane, e.g. http://127.0.0.1:8700
	Token string // the session token
	HTTP  *http.Client
}

// NewSandbox makes a sandbox client; addr may omit the scheme.
func NewSandbox(addr, sessionToken string) *Sandbox {
	return &Sandbox{Addr: baseURL(addr), Token: sessionToken, HTTP: &http.Client{Timeout: 90 * time.Second}}
}

// ActionStatus is a gated call's state (api/openapi.yaml ActionStatus).
type ActionStatus struct {
	ID                string    `json:"id"`
	SessionID         string    `json:"session_id,omitempty"`
	Upstream          string    `json:"upstream,omitempty"`
	Status            string    `json:"status"`
	Reason            string    `json:"reason,omitempty"`
	ExpiresAt         time.Time `json:"expires_at"`
	Approvals         int       `json:"approvals"`
	ApprovalsRequired int       `json:"approvals_required"`
}

// Final reports whether the action can no longer change: executed, denied,
// expired or failed.
func (a *ActionStatus) Final() bool {
	switch a.Status {
	case "executed", "denied", "expired", "failed":
		return true
	}
	return false
}

var actionLocation = regexp.MustCompile(`^/v1/actions/([A-Za-z0-9_-]+)$`)

// Call makes the sandbox's call to upstream through the REST door
// (/v1/proxy/{upstream}{path}). It returns the upstream's answer (the caller
// closes its body), whatever its status; or, for a call that waits for a
// human (202), the pending action; or a *Problem when the broker refused
// the call (the answer carries X-Airlock-Code). wait > 0 sends Prefer:
// wait=N (seconds, at most 60).
//
// operationId: proxyRootGet, proxyRootHead, proxyRootOptions, proxyRootPost, proxyRootPut, proxyRootPatch, proxyRootDelete
// operationId: proxyGet, proxyHead, proxyOptions, proxyPost, proxyPut, proxyPatch, proxyDelete
func (s *Sandbox) Call(ctx context.Context, upstream, method, path string, body io.Reader, header http.Header, wait time.Duration) (*http.Response, *ActionStatus, error) {
	if path != "" && !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, method, s.Addr+"/v1/proxy/"+url.PathEscape(upstream)+path, body)
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if wait > 0 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(int(wait/time.Second)))
	}
	resp, err := s.do(req)
	if err != nil {
		return nil, nil, err
	}
	// The broker's pending answer carries X-Airlock-Action-Id (an upstream's
	// own 202 never does: the broker drops it from upstream answers).
	if m := actionLocation.FindStringSubmatch(resp.Header.Get("Location")); resp.StatusCode == http.StatusAccepted && m != nil &&
		resp.Header.Get("X-Airlock-Action-Id") == m[1] {
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		var a ActionStatus
		if err == nil && json.Unmarshal(data, &a) == nil && a.ID == m[1] {
			return nil, &a, nil
		}
		return nil, nil, fmt.Errorf("a 202 with Location %s that is not an action", m[0])
	}
	return resp, nil, nil
}

// do sends req with the session token; an answer with X-Airlock-Code is
// the broker's refusal, returned as *Problem.
func (s *Sandbox) do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.Header.Get("X-Airlock-Code") != "" {
		defer resp.Body.Close()
		return nil, problemOf(resp)
	}
	return resp, nil
}

// Action reads a gated call's state; wait > 0 long-polls (Prefer: wait=N,
// at most 60 s) until it is decided and executed, or the wait ends.
//
// operationId: getAction
func (s *Sandbox) Action(ctx context.Context, id string, wait time.Duration) (*ActionStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Addr+"/v1/actions/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	if wait > 0 {
		req.Header.Set("Prefer", "wait="+strconv.Itoa(int(wait/time.Second)))
	}
	resp, err := s.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, problemOf(resp)
	}
	var a ActionStatus
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, err
	}
	return &a, nil
}

// ErrWaitTimeout means an action was not final when WaitAction's context
// ended.
var ErrWaitTimeout = errors.New("the action is not final yet")

// WaitAction long-polls an action until it is final (Final) or ctx ends
// (then it returns the last state with ErrWaitTimeout).
func (s *Sandbox) WaitAction(ctx context.Context, id string) (*ActionStatus, error) {
	var last *ActionStatus
	for {
		wait := 60 * time.Second
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Second, time.Until(d).Truncate(time.Second)))
		}
		a, err := s.Action(ctx, id, wait)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, ErrWaitTimeout
			}
			return nil, err
		}
		if a.Final() {
			return a, nil
		}
		last = a
	}
}

// ActionResult is the executed upstream answer of an approved action (the
// caller closes its body); 409 conflict while it is not executed.
//
// operationId: getActionResult
func (s *Sandbox) ActionResult(ctx context.Context, id string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Addr+"/v1/actions/"+url.PathEscape(id)+"/result", nil)
	if err != nil {
		return nil, err
	}
	return s.do(req)
}

// AWSEnv is the environment with which the stock AWS SDK or CLI calls the
// AWS door (/v1/aws/{upstream}) of the sandbox plane at sandboxAddr: the AWS
// SDK signs each request (SigV4) with the session's aws_credentials, which
// only the creation answer of a session with an aws grant holds.
//
// operationId: awsRootGet, awsRootHead, awsRootOptions, awsRootPost, awsRootPut, awsRootPatch, awsRootDelete
// operationId: awsGet, awsHead, awsOptions, awsPost, awsPut, awsPatch, awsDelete
func AWSEnv(s *Session, sandboxAddr, upstream, region string) ([]EnvVar, error) {
	if s.AWSCredentials == nil {
		return nil, errors.New("the session answer has no aws_credentials (only the creation answer of a session with an aws grant)")
	}
	if !strings.Contains(sandboxAddr, "://") {
		sandboxAddr = "http://" + sandboxAddr
	}
	return []EnvVar{
		{"AWS_ENDPOINT_URL", strings.TrimSuffix(sandboxAddr, "/") + "/v1/aws/" + url.PathEscape(upstream)},
		{"AWS_ACCESS_KEY_ID", s.AWSCredentials.AccessKeyID},
		{"AWS_SECRET_ACCESS_KEY", s.AWSCredentials.SecretAccessKey},
		{"AWS_REGION", region}, {"AWS_DEFAULT_REGION", region},
	}, nil
}

// MCPServer is what a stock MCP client (the official SDKs, an agent's
// mcpServers config) needs to call the MCP door of the sandbox plane at
// sandboxAddr for an upstream of type mcp: the Streamable HTTP endpoint
// (/v1/mcp/{upstream}) and the header carrying the session token. The
// client speaks MCP itself (both protocol eras); see docs/mcp.md.
//
// operationId: mcpPost, mcpGet, mcpDelete
func MCPServer(sandboxAddr, upstream, token string) (endpoint string, header http.Header) {
	if !strings.Contains(sandboxAddr, "://") {
		sandboxAddr = "http://" + sandboxAddr
	}
	return strings.TrimSuffix(sandboxAddr, "/") + "/v1/mcp/" + url.PathEscape(upstream), http.Header{"Authorization": {"Bearer " + token}}
}
