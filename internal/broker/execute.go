package broker

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// maxResultBody bounds the stored answer of an executed action.
const maxResultBody = 1 << 20

// runAction runs an approved action's stored request through the steps of
// a live call (Do), with the same checks, codes and records: re-admitted
// (the kill-switch, this replica's currency, the session's standing), its
// grants judged as a live call's would be (a revoked grant matches nothing:
// no_matching_grant; an expired one: grant_expired), its use claimed on its
// grant, then sent exactly as stored, cleared by the reviewers' approval.
// A refusal is recorded as a live call's (call.denied with its code); a
// failure after sending completes the call with its code. claimed reports
// whether claim ran and succeeded: from then on the use is the call's (a
// call not sent refunds it).
func (b *Broker) runAction(a approval.Action, claim func(*grants.Live) error) (res *approval.Result, claimed bool, err error) {
	c := &call{b: b, name: a.Upstream, start: time.Now(), actionID: a.ID, amounts: a.Amounts, action: &a,
		rec: CallRecord{RequestID: a.RequestID, Upstream: a.Upstream, Method: a.Request.Method, Path: a.Request.Path, BytesIn: int64(len(a.Request.Body))}}
	p := &pipe{b: b, c: c, write: func(o *Outcome) Written { err = o.Err; return Written{} }}
	p.ctx = c.startTrace(context.Background()) // its own root, linked to the session's operator trace
	defer c.endTrace()
	l, g, rerr := b.readmit(a)
	c.l = l
	if rerr == nil {
		rerr = claim(g)
	}
	if rerr != nil {
		p.refuse(rerr)
		return nil, false, err
	}
	out := &upstream.Outbound{Method: a.Request.Method, Path: a.Request.Path, Query: a.Request.Query, Header: a.Request.Header.Clone(), Body: a.Request.Body}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	c.grant, c.u, c.out, c.step = g, b.upstreams[a.Upstream], out, stepCleared
	if a.MCP != nil {
		return b.runMCPAction(p, a)
	}
	resp := p.send()
	if resp == nil {
		return nil, true, err
	}
	defer resp.Close()
	body, rdErr := io.ReadAll(io.LimitReader(resp.Scrub.Reader(resp.Body), maxResultBody+1))
	if rdErr != nil {
		p.failSent(upstream.ReadFailed(rdErr), "error", false, 0)
		return nil, true, err
	}
	res = &approval.Result{Status: resp.StatusCode, Header: http.Header{}}
	resp.CopyHeader(res.Header)
	if len(body) > maxResultBody {
		body, res.Truncated = body[:maxResultBody], true
	}
	res.Body = body
	upDur := resp.UpstreamTime()
	b.calls.upstream(p.ctx, c.rec.Upstream, resp.StatusCode, upDur)
	c.complete(resp.StatusCode, int64(len(body)), "")
	b.calls.observe(c.rec.Upstream, "allow", "", c.elapsed()-upDur)
	return res, true, nil
}

// readmit admits an approved action's execution as a live call is
// admitted (Broker.admit, less the token, source and rate: the action
// names its session, and was counted when it was held) and finds its grant
// and the grants its further permissions need, as grants.Evaluate would
// judge them now.
func (b *Broker) readmit(a approval.Action) (*sessions.LiveSession, *grants.Live, error) {
	if b.ks.Engaged() {
		return nil, nil, killswitch.ErrEngaged
	}
	if b.stale() {
		return nil, nil, ErrStale
	}
	l, ok := b.sess.LiveOrLoad(a.SessionID)
	if !ok {
		return nil, nil, session.ErrRevoked
	}
	if err := b.standing(l, netip.Addr{}); err != nil && err != session.ErrWrongSource {
		return l, nil, err
	}
	if _, ok := b.upstreams[a.Upstream]; !ok {
		return l, nil, ErrUnknownUpstream
	}
	now := b.now()
	var g *grants.Live
	for _, id := range append([]string{a.GrantID}, a.PermitGrants...) {
		x := grantIn(l, id)
		switch {
		case x == nil || x.Revoked():
			return l, nil, grants.ErrNoMatchingGrant
		case !now.Before(x.Grant.ExpiresAt):
			return l, nil, grants.ErrGrantExpired
		}
		if g == nil {
			g = x
		}
	}
	return l, g, nil
}

// grantIn is the session's grant id, or nil.
func grantIn(l *sessions.LiveSession, id string) *grants.Live {
	for _, x := range l.Grants() {
		if x.Grant.ID == id {
			return x
		}
	}
	return nil
}
