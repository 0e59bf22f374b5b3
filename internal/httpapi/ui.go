package httpapi

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/approval/web"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
)

// uiProblem renders the reviewers' page's failures from the one problem
// table.
func uiProblem(err error) web.Problem {
	p := problemFor(err)
	return web.Problem{Status: p.Status, Code: p.Code, Title: p.Title, Detail: p.Detail}
}

// uiBackend adapts the broker to what the reviewers' page needs.
type uiBackend struct{ *broker.Broker }

var _ web.Backend = uiBackend{}

func (u uiBackend) ActiveSessions(ctx context.Context) []web.SessionSummary {
	var out []web.SessionSummary
	for _, v := range u.Broker.ActiveSessions() {
		out = append(out, web.SessionSummary{
			ID: v.Session.ID, TaskID: v.Session.TaskID, Isolation: v.Session.Isolation.String(), Required: v.Required.String(),
			CreatedBy: v.Session.CreatedBy, CreatedAt: v.Session.CreatedAt, ExpiresAt: v.Session.ExpiresAt,
			Standing: approval.Standing{UntrustedInput: v.RuleOfTwo.UntrustedInput, SensitiveAccess: v.RuleOfTwo.SensitiveAccess, ExternalAction: v.RuleOfTwo.ExternalAction},
			Gated:    v.RuleOfTwo.Gated(), Grants: len(v.Grants),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out
}

func (u uiBackend) KillSession(ctx context.Context, p auth.Principal, id string) error {
	_, err := u.Broker.KillSession(ctx, p, id)
	return err
}

func (u uiBackend) Killswitch(ctx context.Context) (web.KillswitchView, error) {
	st, err := u.Broker.Killswitch(ctx)
	return web.KillswitchView{Engaged: st.Engaged, Since: st.Since, By: st.By, Reason: st.Reason}, err
}

func (u uiBackend) SetKillswitch(ctx context.Context, p auth.Principal, engaged bool, reason string) error {
	_, err := u.Broker.SetKillswitch(ctx, p, engaged, reason)
	return err
}

// SessionTrail reads the session's last records from the store's index by
// session (not a scan of the whole log), newest first.
func (u uiBackend) SessionTrail(ctx context.Context, sessionID string, limit int) ([]web.TrailEntry, error) {
	out := make([]web.TrailEntry, 0, limit)
	err := u.Broker.LastSessionAudit(ctx, sessionID, limit, func(seq uint64, data []byte) error {
		var e audit.Event
		if json.Unmarshal(data, &e) != nil || e.SessionID != sessionID {
			return nil
		}
		out = append(out, web.TrailEntry{Seq: e.Seq, Time: e.Time, Type: e.Type, Actor: e.Actor.Kind, Method: e.Method, Path: e.Path, Code: e.Code, Status: e.Status, ID: e.ActionID})
		return nil
	})
	return out, err
}

func (u uiBackend) RecordLogin(ctx context.Context, p auth.Principal, ok bool, remote string) {
	u.Broker.RecordLogin(ctx, p, ok, remote)
}

// UIOptions configure the HTTP layer: the reviewers' page and metrics.
type UIOptions struct {
	SessionTTL    time.Duration
	SecureCookies bool
	Registry      *prometheus.Registry // shared with the broker's metrics; nil for a private one
	Pprof         bool                 // serve /debug/pprof/ on the control plane (admin only)
	// ProxyURL is the proxy door's address as sandboxes reach it
	// (host:port), advertised in session answers; "" when the door is off
	// or its address is not known yet (see Server.SetProxyURL).
	ProxyURL string
	// MCPWait is how long the MCP door holds a gated tools/call for the
	// reviewers' decision (approval.mcp_wait; 0: answered pending at once).
	MCPWait time.Duration
	// BodyIdleTimeout cuts a sandbox request body that stops arriving for
	// this long (408); 0 is 30 s.
	BodyIdleTimeout time.Duration
}
