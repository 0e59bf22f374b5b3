package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/approval/web"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// maxWait bounds Prefer: wait=N.
const maxWait = 60 * time.Second

// preferWait reads "Prefer: wait=N" (RFC 7240), capped at 60 s.
func preferWait(r *http.Request) (time.Duration, bool) {
	for _, v := range r.Header.Values("Prefer") {
		for p := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n < 0 {
				return 0, false
			}
			return min(time.Duration(n)*time.Second, maxWait), true
		}
	}
	return 0, false
}

type actionJSON struct {
	ID                string      `json:"id"`
	ActionID          string      `json:"action_id"`
	SessionID         string      `json:"session_id"`
	TaskID            string      `json:"task_id"`
	GrantID           string      `json:"grant_id"`
	Upstream          string      `json:"upstream"`
	Status            string      `json:"status"`
	Reason            string      `json:"reason,omitempty"`
	CreatedAt         time.Time   `json:"created_at"`
	ExpiresAt         time.Time   `json:"expires_at"`
	Approvals         int         `json:"approvals"`
	ApprovalsRequired int         `json:"approvals_required"`
	ResultURL         string      `json:"result_url,omitempty"`
	Request           *reqJSON    `json:"request,omitempty"`
	Pinned            []string    `json:"pinned,omitempty"`
	Filled            []string    `json:"filled,omitempty"`
	RuleOfTwo         *standing   `json:"rule_of_two,omitempty"`
	Decisions         []decision  `json:"decisions,omitempty"`
	Result            *resultJSON `json:"result,omitempty"`
	MCP               *mcpJSON    `json:"mcp,omitempty"`
}

// mcpJSON is a held MCP tool call as its reviewers see it; the server's
// description and annotations are the server's claims, untrusted.
type mcpJSON struct {
	Tool              string                     `json:"tool"`
	Digest            string                     `json:"digest,omitempty"`
	Arguments         map[string]json.RawMessage `json:"arguments"`
	PinnedArguments   []string                   `json:"pinned_arguments"`
	ModelArguments    []string                   `json:"model_arguments"`
	ServerDescription string                     `json:"server_description,omitempty"`
	ServerAnnotations json.RawMessage            `json:"server_annotations,omitempty"`
}

func toMCPJSON(a approval.Action) *mcpJSON {
	v := web.MCPOf(a)
	if v == nil {
		return nil
	}
	out := &mcpJSON{Tool: v.Tool, Digest: v.Digest, Arguments: map[string]json.RawMessage{}, PinnedArguments: v.PinnedNames(),
		ModelArguments: v.ModelNames(), ServerDescription: v.Description, ServerAnnotations: v.Annotations}
	for _, arg := range v.Arguments {
		out.Arguments[arg.Name] = arg.Value
	}
	return out
}

type reqJSON struct {
	Method string      `json:"method"`
	URL    string      `json:"url,omitempty"`
	Path   string      `json:"path"`
	Query  string      `json:"query,omitempty"`
	Header http.Header `json:"headers,omitempty"`
	Body   string      `json:"body,omitempty"`
}

type standing struct {
	UntrustedInput  bool `json:"untrusted_input"`
	SensitiveAccess bool `json:"sensitive_access"`
	ExternalAction  bool `json:"external_action"`
}

type decision struct {
	Reviewer string    `json:"reviewer"`
	Name     string    `json:"name"`
	Verdict  string    `json:"verdict"`
	Comment  string    `json:"comment,omitempty"`
	At       time.Time `json:"at"`
}

type resultJSON struct {
	Status     int       `json:"status,omitempty"`
	Code       string    `json:"code,omitempty"`
	ExecutedAt time.Time `json:"executed_at"`
	LatencyUS  int64     `json:"latency_us"`
	Truncated  bool      `json:"truncated,omitempty"`
}

// toActionJSON is the sandbox's view; full adds what a reviewer sees.
func toActionJSON(a approval.Action, full bool) actionJSON {
	out := actionJSON{ID: a.ID, ActionID: a.ID, SessionID: a.SessionID, TaskID: a.TaskID, GrantID: a.GrantID, Upstream: a.Upstream,
		Status: string(a.Status), Reason: a.Reason, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, Approvals: a.Approvals(),
		ApprovalsRequired: max(1, a.ApprovalsRequired)}
	if a.Status == approval.Executed {
		out.ResultURL = "/v1/actions/" + a.ID + "/result"
	}
	if a.Result != nil {
		out.Result = &resultJSON{Status: a.Result.Status, Code: a.Result.Code, ExecutedAt: a.Result.ExecutedAt, LatencyUS: a.Result.LatencyUS, Truncated: a.Result.Truncated}
	}
	if !full {
		return out
	}
	out.Request = &reqJSON{Method: a.Request.Method, Path: a.Request.Path, Query: a.Request.Query, Header: a.Request.Header, Body: string(a.Request.Body)}
	out.Pinned, out.Filled = a.Pinned, a.Filled
	out.RuleOfTwo = &standing{a.Standing.UntrustedInput, a.Standing.SensitiveAccess, a.Standing.ExternalAction}
	out.MCP = toMCPJSON(a)
	for _, d := range a.Decisions {
		out.Decisions = append(out.Decisions, decision{Reviewer: d.Reviewer, Name: d.Name, Verdict: d.Verdict, Comment: d.Comment, At: d.At})
	}
	return out
}

// reviewerAction is what a reviewer sees of a: everything, with the full
// URL its request is sent to.
func (s *Server) reviewerAction(a approval.Action) actionJSON {
	out := toActionJSON(a, true)
	out.Request.URL = s.b.ActionURL(a)
	return out
}

func writeResult(w http.ResponseWriter, res *approval.Result) {
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(res.Body)))
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// sandboxAction authenticates the sandbox and finds its own action.
func (s *Server) sandboxAction(r *http.Request) (*sessions.LiveSession, approval.Action, error) {
	tok, ok := bearer(r)
	if !ok {
		return nil, approval.Action{}, errMissingToken
	}
	l, err := s.b.Check(tok, remoteAddr(r))
	if err != nil {
		return nil, approval.Action{}, err
	}
	a, err := s.b.SessionAction(r.Context(), l, chi.URLParam(r, "id"))
	return l, a, err
}

// getAction is GET /v1/actions/{id} (sandbox): the status, long-polled with Prefer: wait=N.
func (s *Server) getAction(w http.ResponseWriter, r *http.Request) error {
	l, a, err := s.sandboxAction(r)
	if err != nil {
		return err
	}
	if wait, ok := preferWait(r); ok && wait > 0 && !a.Status.Terminal() {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
		if a, err = s.b.AwaitAction(r.Context(), l, a.ID, wait); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, toActionJSON(a, false))
	return nil
}

// getActionResult is GET /v1/actions/{id}/result (sandbox): the executed upstream answer.
func (s *Server) getActionResult(w http.ResponseWriter, r *http.Request) error {
	_, a, err := s.sandboxAction(r)
	if err != nil {
		return err
	}
	if a.Status == approval.Executed {
		writeResult(w, a.Result)
		return nil
	}
	if err := gate.ActionError(a); err != nil {
		return err
	}
	return approval.ErrNotExecuted
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	status := approval.Status(r.URL.Query().Get("status"))
	switch status {
	case "", approval.Pending, approval.Denied, approval.Expired, approval.Executing, approval.Executed, approval.Failed:
	default:
		return errBadRequestJSON
	}
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	as, err := s.b.Actions(r.Context(), status, limit)
	if err != nil {
		return err
	}
	out := listJSON[actionJSON]{Items: []actionJSON{}}
	for _, a := range as {
		out.Items = append(out.Items, s.reviewerAction(a))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	a, err := s.b.Action(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.reviewerAction(a))
	return nil
}

type decisionRequest struct {
	Comment string `json:"comment"`
}

func (s *Server) decide(verdict string) func(http.ResponseWriter, *http.Request, auth.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		var req decisionRequest
		if r.ContentLength != 0 {
			if err := decodeJSON(r, &req); err != nil {
				return err
			}
		}
		a, err := s.b.DecideAction(r.Context(), p, chi.URLParam(r, "id"), verdict, req.Comment)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.reviewerAction(a))
		return nil
	}
}
