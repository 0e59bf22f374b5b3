// Package approval holds the human gate: pending actions stored exactly as
// they will be sent, reviewers' decisions with quorum, and the notification
// of waiters and webhooks. The reviewers' web page is an adapter over it, in
// package approval/web.
package approval

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// Errors of decisions.
var (
	ErrNotFound        = fault.Hidden(fault.NotFound, "action not found")
	ErrDecided         = fault.New(fault.Conflict, "action already decided")
	ErrExpired         = fault.New(fault.DecidedTooLate, "action expired")
	ErrSelfApproval    = fault.New(fault.Forbidden, "a reviewer cannot approve a session they created")
	ErrAlreadyDecided  = fault.New(fault.Conflict, "this reviewer already decided on this action")
	ErrNotExecuted     = fault.New(fault.Conflict, "action not executed")
	ErrInvalidDecision = fault.New(fault.BadRequest, "verdict must be approve or deny")
)

// Status of an action.
type Status string

// Statuses. pending → (denied | expired | executing → executed | failed).
const (
	Pending   Status = "pending"
	Denied    Status = "denied"
	Expired   Status = "expired"
	Executing Status = "executing"
	Executed  Status = "executed"
	Failed    Status = "failed"
)

// Terminal reports whether no further change can happen.
func (s Status) Terminal() bool {
	return s == Denied || s == Expired || s == Executed || s == Failed
}

// HeldRequest is the exact outbound request, without the credential (the
// broker injects it at execution).
type HeldRequest struct {
	Method string
	Path   string // canonical escaped path below the upstream's base URL
	Query  string // re-encoded checked query
	Header http.Header
	Body   []byte
}

// Review is one reviewer's verdict.
type Review struct {
	Reviewer string // principal id
	Name     string
	Verdict  string // approve | deny
	Comment  string
	At       time.Time
}

// Result is the executed call's answer, scrubbed.
type Result struct {
	Status     int
	Header     http.Header
	Body       []byte
	Truncated  bool
	Code       string // problem code when the execution failed
	ExecutedAt time.Time
	LatencyUS  int64
}

// Standing is the session's Rule-of-Two standing when the action was created.
type Standing struct {
	UntrustedInput, SensitiveAccess, ExternalAction bool
}

// Action is a gated call waiting for (or past) a human decision.
type Action struct {
	ID                string
	SessionID         string
	TaskID            string
	GrantID           string
	Upstream          string
	RequestID         string
	SessionCreatedBy  string
	CreatedAt         time.Time
	ExpiresAt         time.Time
	Status            Status
	Reason            string
	Request           HeldRequest
	Pinned            []string // parameters fixed by the operator's grant
	Filled            []string // pinned parameters the broker filled in
	Standing          Standing
	ApprovalsRequired int
	Amounts           map[string]float64 // budgeted amounts, reserved while pending, spent at execution
	PermitGrants      []string           // other grants whose permission the request needs (an AWS ACL header, a copy's source); each must still hold at execution
	Decisions         []Review
	Result            *Result
	// MCP is set for a held MCP tool call: what its reviewers see beside
	// the exact request (the JSON-RPC message in Request.Body).
	MCP *MCPCall
	// Owner is the replica that claimed an executing action, and LeaseUntil
	// when its claim ends unless renewed: past it, any replica fails the
	// action (never re-sent). Zero when not executing, and on a store that
	// keeps neither (one replica: a restart fails what was executing).
	// Not in bbolt's record (json "-"): the embedded store has one replica.
	Owner      string    `json:"-"`
	LeaseUntil time.Time `json:"-"`
}

// MCPCall is a held MCP tool call as its reviewers see it (DESIGN §10):
// the tool, its digest when the call was held (a tool that changed since
// fails the action unsent), and the server's description and annotations,
// which are the server's claims, shown as such. Join is the key an
// identical retry (same session, upstream, tool and arguments) finds the
// action by.
type MCPCall struct {
	Tool        string
	Digest      string
	Description string
	Annotations string // the server's annotations object as JSON text, or ""
	Join        string
	// Constrained are the values of the arguments the grant's rule
	// constrains, each as its RFC 8785 JSON text (what the executed call's
	// audit record says, as a live call's does).
	Constrained map[string]string
}

// Approvals counts approving decisions.
func (a Action) Approvals() int {
	n := 0
	for _, d := range a.Decisions {
		if d.Verdict == "approve" {
			n++
		}
	}
	return n
}

// Reviewer is who decides.
type Reviewer struct {
	ID   string
	Name string
}

// Decide applies a reviewer's verdict to a, inside the store transaction
// that holds a. It returns true when a reached its quorum and must now be
// executed (its status is then Executing: exactly one caller gets true).
func Decide(a *Action, r Reviewer, verdict, comment string, now time.Time) (bool, error) {
	if verdict != "approve" && verdict != "deny" {
		return false, ErrInvalidDecision
	}
	if a.Status != Pending {
		return false, ErrDecided
	}
	if !now.Before(a.ExpiresAt) {
		return false, ErrExpired
	}
	for _, d := range a.Decisions {
		if d.Reviewer == r.ID {
			return false, ErrAlreadyDecided
		}
	}
	if verdict == "approve" && r.ID == a.SessionCreatedBy {
		return false, ErrSelfApproval
	}
	a.Decisions = append(a.Decisions, Review{Reviewer: r.ID, Name: r.Name, Verdict: verdict, Comment: comment, At: now})
	if verdict == "deny" {
		a.Status, a.Reason = Denied, "denied by "+r.Name
		return false, nil
	}
	if a.Approvals() >= max(1, a.ApprovalsRequired) {
		a.Status = Executing
		return true, nil
	}
	return false, nil
}

// ActionStore persists actions. UpdateAction runs fn on the stored action inside
// one write transaction and stores the result unless fn fails, so state
// transitions are checked where they are made. Action and UpdateAction
// return ErrNotFound (this package's) for an unknown id, never the
// adapter's own not-found error; UpdateAction then does not call fn.
type ActionStore interface {
	PutAction(ctx context.Context, a *Action) error
	Action(ctx context.Context, id string) (Action, error)
	// Actions lists actions with the status ("" for all), newest first, at most limit.
	Actions(ctx context.Context, status Status, limit int) ([]Action, error)
	UpdateAction(ctx context.Context, id string, fn func(*Action) error) (Action, error)
	// PendingSummary counts the pending actions and gives the oldest one's
	// creation time (zero when none), without decoding them; none pending
	// is 0, not an error.
	PendingSummary(ctx context.Context) (n int, oldest time.Time, err error)
}

// Notifier wakes waiters when an action changes, without polling.
type Notifier struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
	all   chan struct{}
}

// NewNotifier makes a notifier.
func NewNotifier() *Notifier {
	return &Notifier{chans: map[string]chan struct{}{}, all: make(chan struct{})}
}

// Changed returns a channel closed at the next change of action id.
func (n *Notifier) Changed(id string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.chans[id]
	if !ok {
		c = make(chan struct{})
		n.chans[id] = c
	}
	return c
}

// Any returns a channel closed at the next change of any action or session
// (for live pages).
func (n *Notifier) Any() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.all
}

// Notify wakes the waiters of id (and of any change); id "" wakes only the latter.
func (n *Notifier) Notify(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.chans[id]; ok && id != "" {
		close(c)
		delete(n.chans, id)
	}
	close(n.all)
	n.all = make(chan struct{})
}
