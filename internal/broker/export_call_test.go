package broker

import (
	"context"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Call exposes a call's steps to the external tests of the steps
// themselves (their order, admission's check list, a failed mint); no
// door can reach them: doors go through Do.
type Call = call

func (b *Broker) NewCall(name, method string) *Call { return b.newCall(name, method) }

func (c *call) Admit(x Caller) error                        { return c.admit(x) }
func (c *call) Authorize(r *Request) error                  { return c.authorize(r) }
func (c *call) Gated() bool                                 { return c.gated() }
func (c *call) Send(ctx context.Context) (*response, error) { return c.send(ctx) }
func (c *call) Complete(status int, n int64, code string)   { c.complete(status, n, code) }
func (c *call) SessionID() string                           { return c.sessionID() }
func (c *call) Live() *sessions.LiveSession                 { return c.l }

// The gate's steps, for the tests of pending actions' expiry.

func (b *Broker) Decide(l *sessions.LiveSession, upstreamName string, c *grants.Call) (*grants.Decision, error) {
	return b.decide(l, upstreamName, c)
}

func (b *Broker) Gated(l *sessions.LiveSession, d *grants.Decision) bool { return b.appr.Gated(l, d) }

func (b *Broker) Hold(ctx context.Context, l *sessions.LiveSession, d *grants.Decision, out *upstream.Outbound, rec CallRecord) (approval.Action, error) {
	return b.appr.Hold(ctx, l, d, out, nil, callEvent(l, rec))
}
