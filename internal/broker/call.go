package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/printable"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The steps of a call, in order (Do runs them, see pipeline.go):
//
//	c := b.newCall(upstream, method)     // request id, clock, audit record
//	c.admit(caller)                      // kill-switch, identity, session state, source, rate
//	c.egress(host, port, tunnel)         // the proxy door: the destination's upstream
//	c.authorize(&Request{...})           // decide, build the outbound request, further permissions
//	c.gated() → c.hold(ctx)              // wait for a human
//	c.send(ctx) → *response              // credential, durable "allowed" record, upstream call
//	c.complete(status, bytes, code)      // the outcome, once the door wrote the answer
//
// A refusal at any step is c.refuse(ctx, err, code): the durable "denied"
// record. Each step gives back what it reserved when it fails.

// Caller is who makes a sandbox call: a bearer of a session token, or a
// SigV4 signer whose access key id is the session id (its signature is
// verified with Call.VerifySigV4 once the body is read).
type Caller struct {
	id     string
	sigv4  bool
	remote netip.Addr
}

// BearerCaller is a caller presenting a session token.
func BearerCaller(token string, remote netip.Addr) Caller {
	return Caller{id: token, remote: remote}
}

// SigV4Caller is a caller signing with the session's aws_credentials.
func SigV4Caller(accessKey string, remote netip.Addr) Caller {
	return Caller{id: accessKey, sigv4: true, remote: remote}
}

// clockSkew bounds how far a SigV4 request's time may be from the broker's.
const clockSkew = 15 * time.Minute

// Errors of Send, by the step that failed. The error Send returns wraps one
// of them and the cause; its text is the cause's.
var (
	// ErrNoCredential: the credential could not be fetched. Nothing was
	// sent and the call's reservation was released.
	ErrNoCredential = errors.New("credential unavailable")
	// ErrNotRecorded: the durable "allowed" record could not be written
	// (the cause wraps audit.ErrUnavailable). Nothing was sent and the
	// call's reservation was released.
	ErrNotRecorded = errors.New("allowed record not written")
	// ErrNotSent: a kill (the session's, or the kill-switch) came before the
	// call was recorded; the cause is the kill's. Nothing was sent and the
	// call's reservation was released.
	ErrNotSent = errors.New("call cut by a kill before it was sent")
	// ErrNoAnswer: the upstream call failed after it was recorded. When a
	// kill cut it, the cause is the kill's (session.ErrRevoked or
	// killswitch.ErrEngaged).
	ErrNoAnswer = errors.New("upstream call failed")
)

// stepError is a Send failure: errors.Is matches its step and its cause;
// its text is the cause's alone (doors show safe causes' text).
type stepError struct{ step, cause error }

func (e *stepError) Error() string   { return e.cause.Error() }
func (e *stepError) Unwrap() []error { return []error{e.cause, e.step} }

// Call is one sandbox call on its way through the broker (see above).
type call struct {
	b     *Broker
	name  string     // the upstream as the door named it
	rec   CallRecord // what the audit records say of the call
	start time.Time  // wall clock: latency, never expiry
	sent  time.Time  // when the upstream call began (send), wall clock

	l       *sessions.LiveSession
	u       *upstream.Upstream
	d       *grants.Decision   // the decision that reserved the call's use (not for an executed action)
	permits []*grants.Decision // further permissions the request needs (AWS)
	out     *upstream.Outbound
	// outbound is where restOutbound builds out (a call's own, as resp is).
	outbound upstream.Outbound

	// An approved action's execution: the grant its use was consumed on
	// (refunded with amounts when the call is not sent), and its id.
	grant    *grants.Live
	amounts  map[string]float64
	actionID string
	action   *approval.Action // the action executed (its session, when the session is gone)

	mcp  *callMCP       // an MCP call's state (mcp.go), or nil
	dest Destination    // the proxy door's destination (egress)
	wait *time.Duration // how long a gated call waits, when the door's parse set it

	bind    sessions.Binding // send's context's attachment to the grant's standing
	resp    response         // send's answer
	answer  Answer           // the door's view of it (Do)
	outcome Outcome          // what Do gave the door
	adm     Admitted         // what the door's parse sees, kept here: no allocation of its own

	step callStep  // how far the call got: the steps run only in order
	tr   callTrace // the call's span, nil when tracing is off (trace.go)
}

// callStep is how far a call got; each step requires the one before.
type callStep uint8

const (
	stepNew        callStep = iota
	stepAdmitted            // Admit passed
	stepAuthorized          // Authorize passed
	stepCleared             // Gated said no, or an approved action: Send may run
	stepSent                // Send ran (once)
)

// ErrOutOfOrder is the pipeline's steps run out of order (send before the
// gate cleared the call, twice, or authorize before admit): a bug, refused.
var ErrOutOfOrder = errors.New("call pipeline steps out of order")

// newCall starts a call to the named upstream: its request id (a door
// answers it at once, so even a refusal carries it), its clock and its
// audit record.
func (b *Broker) newCall(upstreamName, method string) *call {
	start := time.Now()
	return &call{b: b, name: upstreamName, start: start,
		rec: CallRecord{RequestID: NewRequestID(), Upstream: clip(upstreamName, 64), Method: clip(method, 16)}}
}

// clip bounds what a caller chose before it goes in a record or a span:
// escaped to printable text (no control character, valid UTF-8, so no
// exporter refuses it and no terminal obeys it), cut on a character.
func clip(s string, n int) string { return printable.Clip(s, n) }

// Elapsed is the time since the call began (wall clock).
func (c *call) elapsed() time.Duration { return time.Since(c.start) }

// SessionID is the caller's session id once identified, or "".
func (c *call) sessionID() string {
	if c.l == nil {
		return ""
	}
	return c.l.Session.ID
}

// Admit checks the caller, in this order: the global kill-switch
// (killswitch.ErrEngaged); the token or access key (session.ErrInvalidToken, or for
// a token whose session is gone session.ErrRevoked or ErrExpired); the
// session's state (session.ErrRevoked, session.ErrExpired); the source
// address (session.ErrWrongSource); the session's call rate
// (ErrRateLimited). The session, once identified, stays on the call for the
// refusal's record.
func (c *call) admit(caller Caller) error {
	if c.step != stepNew {
		return ErrOutOfOrder
	}
	l, err := c.b.admit(caller)
	c.l = l
	if err == nil {
		c.step = stepAdmitted
	}
	return err
}

func (b *Broker) admit(c Caller) (*sessions.LiveSession, error) {
	if b.ks.Engaged() {
		return nil, killswitch.ErrEngaged
	}
	if b.stale() {
		return nil, ErrStale
	}
	var l *sessions.LiveSession
	if c.sigv4 {
		var ok bool
		if l, ok = b.sess.SigV4Session(c.id); !ok {
			return nil, session.ErrInvalidToken
		}
	} else {
		var err error
		if l, err = b.identify(c.id); err != nil {
			return nil, err
		}
	}
	if err := b.standing(l, c.remote); err != nil {
		return l, err
	}
	if !l.Allow() {
		return l, ErrRateLimited
	}
	return l, nil
}

// Request is a canonical sandbox request as a door parsed it (DESIGN §4):
// what the grants judge, and what the request sent is built from.
type Request struct {
	grants.Call
	// Raw is the body as received.
	Raw []byte
	// AWS is set by the SigV4 door: the request is sent as the AWS API
	// reads it, signed anew.
	AWS *AWSCall
	// MCP is set by the MCP door (mcp.go).
	MCP *MCPRequest
}

// AWSCall is what the SigV4 door adds to a Request.
type AWSCall struct {
	Path     string // the escaped path to send (built from the checked bucket and key when the operation has one)
	RawQuery string // the query as received, sent unless a rule filled a parameter in
	// Also are further permissions the request needs (a copy's source,
	// headers that set an ACL, a lock, tags), checked on the request as it
	// will be sent.
	Also []upstream.Permission
}

// Authorize evaluates the request against the session's grants (see
// Decide; on success one use and any budget of the grant is reserved),
// builds the request to send from what was checked, and checks the further
// permissions it needs (see Permit). On failure nothing stays reserved.
func (c *call) authorize(req *Request) error {
	if c.step != stepAdmitted {
		return ErrOutOfOrder
	}
	d, err := c.b.decide(c.l, c.name, &req.Call)
	if err != nil {
		return err
	}
	u := c.b.upstreams[c.name]
	if req.AWS == nil {
		var out *upstream.Outbound
		if req.MCP != nil {
			out, err = c.mcpOutbound(req, d)
		} else {
			out, err = restOutbound(u, req, d, &c.outbound)
		}
		if err != nil {
			d.Release()
			return err
		}
		c.u, c.d, c.grant, c.out = u, d, d.Grant, out
		c.step = stepAuthorized
		return nil
	}
	out := &upstream.Outbound{Method: req.Method, Path: req.AWS.Path, Query: req.AWS.RawQuery, Header: awsForwardHeaders(req.Header, d.Header), Body: req.Raw}
	if len(d.Filled) > 0 {
		out.Query = grants.EncodeQuery(d.Query)
	}
	// The further permissions reserve no use (the call is one call), but an
	// exhausted grant permits nothing and a permitting rule gates the call
	// as its own would.
	var permits []*grants.Decision
	for _, p := range req.AWS.Also {
		also := &grants.Call{Method: req.Method, Action: p.Action, Resource: p.Resource, Query: d.Query, Header: out.Header,
			Body: d.Body, BodyJSON: req.BodyJSON, HasBody: req.HasBody}
		pd, err := c.b.permit(c.l, c.name, also, d)
		if err != nil {
			d.Release()
			return fmt.Errorf("%s on %s (required by %s): %w", p.Action, p.Resource, p.Because, err)
		}
		permits = append(permits, pd)
	}
	c.u, c.d, c.grant, c.out, c.permits = u, d, d.Grant, out, permits
	c.step = stepAuthorized
	return nil
}

// restOutbound builds the request to send from what was checked: canonical
// path, re-encoded query, allowlisted headers plus the rule's checked or
// pinned ones, and the checked (or re-serialized) body. It is built in out
// (the call's own: no allocation of its own), and returned.
func restOutbound(u *upstream.Upstream, req *Request, d *grants.Decision, out *upstream.Outbound) (*upstream.Outbound, error) {
	h := make(http.Header, len(u.ForwardHeaders)+len(d.Header))
	for name := range u.ForwardHeaders {
		if vs, ok := req.Header[name]; ok {
			h[name] = vs
		}
	}
	for name, vs := range d.Header {
		h[name] = vs
	}
	query := d.Query
	if u.Inject.Query != "" {
		// The sandbox cannot supply (or shadow) the credential parameter, under
		// any key an upstream could read as its name (API_KEY, api_key[], api.key).
		kept := query[:0:0]
		for _, p := range query {
			if !grants.QueryKeyReaches(p.Key, u.Inject.Query) {
				kept = append(kept, p)
			}
		}
		query = kept
	}
	*out = upstream.Outbound{Method: req.Method, Path: grants.JoinPath(req.Segments), Query: grants.EncodeQuery(query), Header: h}
	if req.WebSocket {
		// The handshake (RFC 6455 §4.1), checked by the door; never
		// Sec-WebSocket-Extensions: compressed frames could not be scrubbed.
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
		for _, name := range []string{"Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Protocol"} {
			if vs, ok := req.Header[name]; ok {
				h[name] = vs
			}
		}
	}
	switch {
	case d.BodyChanged:
		b, err := d.BodyBytes(req.Raw)
		if err != nil {
			return nil, err
		}
		out.Body = b
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
	case req.HasBody:
		out.Body = req.Raw
	}
	return out, nil
}

// awsForwardHeaders keeps what the AWS API means (content headers, x-amz-*
// parameters such as metadata and copy source) and drops the sandbox's
// signature, its framing, and anything that is hop-by-hop.
func awsForwardHeaders(in, pinned http.Header) http.Header {
	out := http.Header{}
	for k, vs := range in {
		lk := strings.ToLower(k)
		switch {
		case lk == "authorization", lk == "x-amz-date", lk == "x-amz-content-sha256", lk == "x-amz-security-token",
			lk == "x-amz-decoded-content-length", lk == "x-amz-trailer", lk == "expect", lk == "content-length",
			lk == "amz-sdk-invocation-id", lk == "amz-sdk-request", lk == "x-amz-user-agent":
		case lk == "content-encoding":
			var kept []string
			for _, v := range vs {
				for e := range strings.SplitSeq(v, ",") {
					if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
						kept = append(kept, e)
					}
				}
			}
			if len(kept) > 0 {
				out[k] = []string{strings.Join(kept, ",")}
			}
		case strings.HasPrefix(lk, "x-amz-"), lk == "content-type", lk == "content-md5", lk == "cache-control",
			lk == "content-disposition", lk == "content-language", lk == "expires", lk == "range",
			lk == "if-match", lk == "if-none-match", lk == "if-modified-since", lk == "if-unmodified-since", lk == "accept":
			if !grants.ForbiddenHeader(k) {
				out[k] = vs
			}
		}
	}
	for k, vs := range pinned {
		out[k] = vs
	}
	return out
}

// Gated reports whether the authorized call must wait for a human (see
// Broker.Gated): then Hold it, else Send it.
func (c *call) gated() bool {
	if c.step != stepAuthorized {
		return true // nothing to clear: Send refuses it anyway
	}
	gated := c.b.appr.Gated(c.l, c.d, c.permits...)
	if !gated {
		c.step = stepCleared
	}
	return gated
}

// Hold turns the gated call into a pending action (see Broker.Hold), which
// keeps the call's reservation.
func (c *call) hold(ctx context.Context) (approval.Action, error) {
	if c.step != stepAuthorized {
		return approval.Action{}, ErrOutOfOrder
	}
	c.step = stepSent // the action is sent, once, by its execution
	return c.b.appr.Hold(ctx, c.l, c.d, c.out, c.mcpView(), callEvent(c.l, c.rec), c.permits...)
}

// Response is an upstream's answer to a sent call, its body decoded (see
// upstream.Upstream.Do): the door writes it, scrubbed with Scrub, then
// calls Close and the call's Complete.
type response struct {
	*http.Response
	Scrub  *upstream.Scrubber
	bound  context.Context
	sent   time.Time
	cancel context.CancelFunc
	stop   *sessions.Binding // bound's
	span   trace.Span        // the upstream attempt's, ended with the answer (nil: not traced)
}

// CopyHeader copies the answer's headers for the sandbox (see
// upstream.ResponseHeader): hop-by-hop headers, cookies and headers named
// by a secret dropped, every value scrubbed.
func (r *response) CopyHeader(dst http.Header) {
	upstream.ResponseHeader(dst, r.Response.Header, r.Scrub)
}

// Interrupted is why a kill or a lifetime cut the call (see
// broker.Interrupted), or nil.
func (r *response) Interrupted() error { return Interrupted(r.bound) }

// Done is closed when the call's standing ends: the door's request, the
// session's kill or expiry, its grant's revocation or expiry, or the
// kill-switch (see BoundTo). A relay (WebSocket) ends with it.
func (r *response) Done() <-chan struct{} { return r.bound.Done() }

// UpstreamTime is the time since the request was sent (wall clock).
func (r *response) UpstreamTime() time.Duration { return time.Since(r.sent) }

// Close ends the answer: its body, and the call's deadline and kill watch.
func (r *response) Close() {
	r.Response.Body.Close()
	r.cancel()
	r.stop.Stop()
	endUpstream(r.span, r.StatusCode, nil)
}

// Send performs the authorized call: it fetches the credential, writes the
// durable "allowed" record, then sends the request with the credential,
// cut off by the upstream's timeout, by parent's end, or by a kill of the
// session or the kill-switch (see Bound). It fails closed: without the
// credential (ErrNoCredential) or the record (ErrNotRecorded) nothing is
// sent and the call's reservation is released. A failed upstream call is
// ErrNoAnswer. The caller must Close the Response.
func (c *call) send(parent context.Context) (*response, error) {
	if c.step != stepCleared {
		// Never sent without the gate's say, nor twice (a door's bug): an
		// authorized call's reservation is given back, a sent one's kept.
		if c.step == stepAuthorized {
			c.unreserve()
		}
		return nil, &stepError{step: ErrNotSent, cause: ErrOutOfOrder}
	}
	c.step = stepSent
	bound := c.b.sess.Bind(parent, c.l, c.grant, &c.bind) // BoundTo's context, its binding kept on the call
	ctx, cancel := context.WithTimeout(bound, c.u.Timeout)
	fail := func(step, cause error) (*response, error) {
		cancel()
		c.bind.Stop()
		return nil, &stepError{step: step, cause: cause}
	}
	credCtx, span := c.startCredential(ctx)
	cred, err := c.b.creds.Credential(credCtx, c.l, c.u) // the upstream's, or this session's minted (internal/credentials)
	endSpan(span, err)
	if err != nil {
		c.unreserve()
		return fail(ErrNoCredential, err)
	}
	if c.u.Kind == kindMCP {
		// The link's upstream session, opened before the call is recorded:
		// a server that cannot be initialized is sent nothing of the call.
		if err := c.mcpReady(ctx, cred); err != nil {
			c.unreserve()
			return fail(ErrNotSent, err)
		}
	}
	// A kill that came while the door read the request or the credential
	// was fetched: refused here, before anything is recorded as allowed.
	// (Bound's cancellation is asynchronous; the flags are not.)
	if cut := c.cut(bound); cut != nil {
		c.unreserve()
		return fail(ErrNotSent, cut)
	}
	// An action's execution has no request of its own: its record is
	// written under the call's deadline and kill watch.
	recCtx := parent
	if c.actionID != "" {
		recCtx = ctx
	}
	if err := c.recordAllowed(recCtx); err != nil {
		if errors.Is(err, audit.ErrKilled) {
			// Another replica's kill committed first (the store's check
			// inside the record's transaction): refused, nothing sent.
			if cut := c.cut(bound); cut != nil {
				return fail(ErrNotSent, cut)
			}
			return fail(ErrNotSent, c.killedBy(parent))
		}
		return fail(ErrNotRecorded, err)
	}
	sent := time.Now()
	c.sent = sent
	upCtx, span := c.startUpstream(ctx)
	resp, err := c.u.Do(upCtx, c.out, cred)
	if err != nil {
		if cut := Interrupted(bound); cut != nil {
			err = cut
		}
		endUpstream(span, 0, err)
		return fail(ErrNoAnswer, err)
	}
	c.resp = response{Response: resp, Scrub: cred.Scrub, bound: bound, sent: sent, cancel: cancel, stop: &c.bind, span: span}
	return &c.resp, nil
}

// cut is why a kill or a lifetime ended the call's standing, or nil.
func (c *call) cut(bound context.Context) error {
	if err := c.b.ended(c.l, c.grant); err != nil {
		return err
	}
	return Interrupted(bound)
}

// ended is why the standing of work on session l and its grant g (nil:
// the session's alone) has ended, read from their state now (the flags
// are set before the contexts are cancelled, asynchronously), or nil.
func (b *Broker) ended(l *sessions.LiveSession, g *grants.Live) error {
	switch {
	case b.ks.Engaged():
		return killswitch.ErrEngaged
	case l.Revoked():
		return session.ErrRevoked
	case g != nil && g.Revoked():
		return grants.ErrGrantRevoked
	}
	now := b.now()
	switch {
	case !now.Before(l.Session.ExpiresAt):
		return session.ErrExpired
	case g != nil && !now.Before(g.Grant.ExpiresAt):
		return grants.ErrGrantExpired
	}
	return nil
}

// killedBy says which kill the store's guard refused the call's allowed
// record for (audit.ErrKilled: a kill committed on another replica that
// this one has not applied yet), read from the store, so the call is
// answered as one broker would: the kill-switch (killswitch_engaged), the
// session (session_revoked) or its grant (the grant is skipped as revoked:
// no_matching_grant). Unreadable or none of them: session_revoked. Only
// refused calls pay these reads.
func (c *call) killedBy(parent context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Second)
	defer cancel()
	if engaged, err := c.b.ks.Stored(ctx); err == nil && engaged {
		return killswitch.ErrEngaged
	}
	if s, err := c.b.sess.Store().Session(ctx, c.l.Session.ID); err == nil && !s.RevokedAt.IsZero() {
		return session.ErrRevoked
	}
	if r, err := c.b.sess.Store().Grant(ctx, c.grant.Grant.ID); err == nil && !r.Grant.RevokedAt.IsZero() {
		return grants.ErrNoMatchingGrant
	}
	return session.ErrRevoked
}

// unreserve gives back what the call reserved on its grant, when it is not sent.
func (c *call) unreserve() {
	if c.d != nil {
		c.d.Release()
		return
	}
	c.grant.Refund(c.amounts)
}

// CallRecord describes a sandbox call for the audit log.
type CallRecord struct {
	RequestID string
	Upstream  string
	Method    string
	Path      string
	BytesIn   int64
	// TraceID and SpanID are the call's span (W3C hex), when it is traced
	// and sampled: in each of the call's records.
	TraceID, SpanID string
}

// recordAllowed writes the durable "allowed" record of a call before it is
// sent, with the grant's usage (taken after the decision's reservation, so
// it counts this call; versioned, so a concurrent call's older snapshot
// sequenced after it cannot replace it in the store). If it cannot be
// written the reservation is released and the error wraps
// audit.ErrUnavailable: the call must not happen.
func (c *call) recordAllowed(ctx context.Context) error {
	ev := callEvent(c.l, c.rec)
	ev.Type, ev.Decision = audit.TypeCallAllowed, "allow"
	ev.GrantID, ev.ActionID = c.grant.Grant.ID, c.actionID
	c.mcpRecord(&ev)
	var side *grants.UsageUpdate
	// A shared count (usage.Store) is the truth: no snapshot of this
	// broker's mirror may overwrite it.
	if sessions.Limited(&c.grant.Grant) && !c.grant.Shared() {
		side = &grants.UsageUpdate{GrantID: c.grant.Grant.ID, Usage: c.grant.Usage()}
	}
	ctx, span := c.childSpan(ctx, "airlock.audit.append", trace.SpanKindInternal)
	rec, err := c.b.audit.AppendGuarded(ctx, ev, side)
	if err != nil {
		endSpan(span, err)
		c.unreserve()
		return err
	}
	if c.tr.seq = rec.Seq; span != nil {
		span.SetAttributes(attrAuditSeq.Int64(int64(rec.Seq)))
	}
	endSpan(span, nil)
	return nil
}

// Refuse writes the durable record of the refused call, with the code the
// door answered: a refusal at any step (admission, authorization, a
// pending limit, a credential that could not be fetched).
func (c *call) refuse(ctx context.Context, cause error, code string) error {
	ev := callEvent(c.l, c.rec)
	ev.ActionID = c.actionID
	if c.l == nil && c.action != nil {
		ev.Actor.ID, ev.SessionID, ev.TaskID = c.action.SessionID, c.action.SessionID, c.action.TaskID
	}
	ev.Type, ev.Decision, ev.Code = audit.TypeCallDenied, "deny", code
	if errors.Is(cause, ErrEgressDenied) {
		ev.Type = audit.TypeEgressDenied
	}
	ev.Reason = denialReason(cause)
	c.mcpRecord(&ev)
	c.tr.denied = true
	_, err := c.b.audit.Append(ctx, ev, nil)
	return err
}

// Complete appends the outcome of a sent call, off the caller's path (the
// decision is already durable): the status the client got (0 when the
// upstream gave none), the bytes of the answer it got, and the code of a
// failure.
func (c *call) complete(status int, bytesOut int64, code string) {
	c.completeWhy(status, bytesOut, code, "")
}

// completeWhy is complete for a failure, with its safe cause as the
// record's reason (fault.Reason).
func (c *call) completeWhy(status int, bytesOut int64, code, reason string) {
	ev := callEvent(c.l, c.rec)
	ev.Type, ev.Status, ev.LatencyUS, ev.BytesOut, ev.Code = audit.TypeCallCompleted, status, time.Since(c.start).Microseconds(), bytesOut, code
	ev.Reason = reason
	ev.ActionID = c.actionID
	if c.grant != nil {
		ev.GrantID = c.grant.Grant.ID
	}
	c.mcpRecord(&ev)
	c.tr.status, c.tr.code = status, code
	c.b.audit.AppendAsync(ev)
}

func callEvent(l *sessions.LiveSession, c CallRecord) audit.Event {
	ev := audit.Event{
		Actor: audit.Actor{Kind: "sandbox"}, RequestID: c.RequestID, Upstream: c.Upstream,
		Method: c.Method, Path: c.Path, BytesIn: c.BytesIn, TraceID: c.TraceID, SpanID: c.SpanID,
	}
	if l != nil {
		ev.Actor.ID = l.Session.ID
		ev.SessionID, ev.TaskID = l.Session.ID, l.Session.TaskID
	}
	return ev
}

// denialReason is the audit's reason: the error's text for a bad request,
// a constraint or a destination (they name parameters, constraints and
// hosts, never values or secrets), else its safe cause (a credential not
// had: fault.CauseOf), else the message of its kind's error.
func denialReason(err error) string {
	var v *grants.Violation
	if errors.As(err, &v) {
		return v.Error()
	}
	f := fault.Find(err)
	switch {
	case f == nil:
		return "refused"
	case f.Kind == fault.BadRequest || f.Kind == fault.EgressDenied:
		return err.Error()
	}
	if cause := fault.CauseOf(err); cause != "" {
		return cause // a failure's safe cause: what its log line and problem say
	}
	return f.Msg
}
