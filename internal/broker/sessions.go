package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// The sessions' operations, served by sessions.Service; an unknown
// session or grant is ErrNotFound here, a grant added to a session that
// is over ErrConflict.

// fieldErr is a bad request naming its field.
func fieldErr(field, format string, args ...any) error {
	return &fault.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// notFound is err, with the session store's not-found error as ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sessions.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

func (b *Broker) upstreamKind(name string) (string, bool) {
	u, ok := b.upstreams[name]
	if !ok {
		return "", false
	}
	return u.Kind, true
}

// ruleOfTwo derives A, B, C from a session and its usable grants.
func (b *Broker) ruleOfTwo(untrusted bool, gs []*grants.Live) session.RuleOfTwo {
	r := session.RuleOfTwo{UntrustedInput: untrusted}
	now := b.now()
	for _, g := range gs {
		if g.Revoked() || !now.Before(g.Grant.ExpiresAt) {
			continue
		}
		if u, ok := b.upstreams[g.Grant.Upstream]; ok && u.Sensitive {
			r.SensitiveAccess = true
		}
		if g.HasIrreversible() {
			r.ExternalAction = true
		}
	}
	return r
}

// awsUpstream reports whether upstream name is an AWS one.
func (b *Broker) awsUpstream(name string) bool {
	u := b.upstreams[name]
	return u != nil && u.AWS != nil
}

// CreateSession validates req, stores the session and its grants, and
// returns its token (shown once).
func (b *Broker) CreateSession(ctx context.Context, p auth.Principal, req sessions.SessionRequest) (sessions.SessionView, error) {
	req.Traceparent = operatorTrace(req.Traceparent)
	return b.sess.Create(ctx, p, req)
}

func (b *Broker) live(id string) (*sessions.LiveSession, bool) { return b.sess.Live(id) }

// Session returns a session's view, from memory when active, else from the store.
func (b *Broker) Session(ctx context.Context, id string) (sessions.SessionView, error) {
	v, err := b.sess.Session(ctx, id)
	return v, notFound(err)
}

// Sessions lists sessions in creation order after cursor `after`.
func (b *Broker) Sessions(ctx context.Context, after string, limit int) ([]sessions.SessionView, string, error) {
	return b.sess.Sessions(ctx, after, limit)
}

// KillSession ends a session at once: its token stops working, its grants
// are revoked, and its in-flight upstream calls are cancelled.
func (b *Broker) KillSession(ctx context.Context, p auth.Principal, id string) (sessions.SessionView, error) {
	v, err := b.sess.Kill(ctx, p, id)
	return v, notFound(err)
}

// AddGrant attaches a grant to an active session.
func (b *Broker) AddGrant(ctx context.Context, p auth.Principal, sessionID string, spec grants.Spec) (sessions.GrantView, error) {
	v, err := b.sess.AddGrant(ctx, p, sessionID, spec)
	if errors.Is(err, sessions.ErrInactive) {
		return v, fmt.Errorf("%w: the session is no longer active", ErrConflict)
	}
	return v, notFound(err)
}

// Grant returns one grant.
func (b *Broker) Grant(ctx context.Context, id string) (sessions.GrantView, error) {
	v, err := b.sess.Grant(ctx, id)
	return v, notFound(err)
}

// RevokeGrant makes a grant unusable at once.
func (b *Broker) RevokeGrant(ctx context.Context, p auth.Principal, id string) (sessions.GrantView, error) {
	v, err := b.sess.RevokeGrant(ctx, p, id)
	return v, notFound(err)
}

// ActiveSessions lists the sessions in memory that are alive.
func (b *Broker) ActiveSessions() []sessions.SessionView { return b.sess.Active() }

// RecordLogin audits a reviewer's log-in to the web page.
func (b *Broker) RecordLogin(ctx context.Context, p auth.Principal, ok bool, remote string) {
	ev := audit.Event{Type: audit.TypeUILogin, Actor: b.actorOf(p), Decision: "allow", Reason: "from " + remote}
	if !ok {
		ev.Decision, ev.Actor = "deny", audit.Actor{Kind: "unknown"}
	}
	if _, err := b.audit.Append(ctx, ev, nil); err != nil {
		b.log.Error("audit of a log-in failed", "err", err)
	}
	b.appr.Notify()
}
