package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The call pipeline as one operation. A door parses its protocol into an
// Inbound and hands it to Do with its writer; Do runs every step of the
// call (admission, the destination, the door's parse, the grants, the
// human gate, the credential, the durable record, the upstream call, the
// scrubbed answer) and gives the writer exactly one Outcome. Recording a
// refusal, recording the completion, counting the metrics and scrubbing
// the answer are Do's: a door cannot forget them, nor reach them.

// Inbound is a sandbox call as its door parsed it, before admission.
type Inbound struct {
	// Upstream is the upstream the door names ("" when Egress names it).
	Upstream string
	Method   string
	Caller   Caller
	// Refused is a refusal the door found before the caller could be
	// admitted (no token, a signature that does not parse, an upstream
	// that is not the door's kind): the call is refused with it, recorded
	// like any other.
	Refused error
	// Egress, on the proxy door, is the destination the client asked for:
	// once the caller is admitted it must name an upstream the session
	// holds a live grant on, which the call then goes to (see
	// Broker.egress).
	Egress *Egress
	// Check, when set, runs once the caller is admitted, before Egress and
	// Parse: a door's own refusal of what the caller asked (the proxy
	// door's scheme of a plain request).
	Check func() error
	// Parse reads the request once the caller is admitted (a SigV4 body is
	// read with the session's signing secret): the canonical request, or
	// why it is refused.
	Parse func(*Admitted) (*Request, error)
	// Wait is how long a gated call may hold its connection for the
	// reviewers' decision (0: it is answered pending at once).
	Wait time.Duration
}

// Egress is a proxy-door destination as the client named it: a tunnel
// (CONNECT, the port defaulting to 443 for an upstream host) or a plain
// http:// request (port 80).
type Egress struct {
	Host   string
	Port   int
	Tunnel bool
}

// Admitted is the admitted call, as a door's Parse sees it.
type Admitted struct{ c *call }

// RequestID is the call's request id.
func (a *Admitted) RequestID() string { return a.c.rec.RequestID }

// SetWait sets how long the call may wait for a human, in place of
// Inbound.Wait (a door that learns it from the upstream: an AWS client
// cannot follow a 202).
func (a *Admitted) SetWait(d time.Duration) { a.c.wait = &d }

// SessionID is the admitted caller's session.
func (a *Admitted) SessionID() string { return a.c.l.Session.ID }

// Upstream is the upstream the call goes to.
func (a *Admitted) Upstream() *upstream.Upstream { return a.c.u }

// Destination is where the proxy door's client asked to go, as the broker
// read it (zero without Inbound.Egress).
func (a *Admitted) Destination() Destination { return a.c.dest }

// SetPath records the call's path and the size of its body as the door
// read them (refusals from here on carry them).
func (a *Admitted) SetPath(path string, bytesIn int64) { a.c.rec.Path, a.c.rec.BytesIn = path, bytesIn }

// AWSSecret is the session's SigV4 signing secret (see Broker.AWSSecret).
func (a *Admitted) AWSSecret() string { return a.c.b.AWSSecret(a.c.l.Session.ID) }

// VerifySigV4 verifies the signature of the request over payloadHash (the
// hash the signature covers, see upstream.SigV4) with the session's
// secret, and its time against the broker's clock.
func (a *Admitted) VerifySigV4(sig *upstream.SigV4, r *http.Request, payloadHash string, s3 bool) error {
	return sig.Verify(r, a.AWSSecret(), payloadHash, a.c.b.now(), clockSkew, s3)
}

// Outcome is what became of a call, given to the door's writer once. Err,
// Action, Result and Answer are exclusive.
type Outcome struct {
	RequestID string
	// Err: the call was refused, or failed; already recorded, counted and
	// logged. The door writes it in its protocol (its fault.Kind decides
	// the status and code).
	Err error
	// Held: the call was held for a human (Err, Action or Result then
	// follow the hold); Wait is how long it could wait for the decision.
	Held bool
	Wait time.Duration
	// ActionID is a held call's action (Held), whatever became of it.
	ActionID string
	// Action: the call waits for a reviewer's decision.
	Action *approval.Action
	// Result: the call was approved and executed while it waited.
	Result *approval.Result
	// Answer: the upstream's answer, scrubbed.
	Answer *Answer
}

// Answer is an upstream's answer for the sandbox. Exactly one of Body,
// Stream and Relay holds its content, unless it has none (HEAD, 204, 304).
type Answer struct {
	Status int
	// Body is a small answer, whole and scrubbed.
	Body []byte
	// Stream is a larger answer (or one of unknown length), scrubbed as it
	// is read; the door flushes as it writes.
	Stream io.Reader
	// Relay is an upgraded WebSocket connection.
	Relay *Relay
	// MCP is an MCP answer (the MCP door's), scrubbed.
	MCP *MCPAnswer

	resp      *response // the upstream's answer
	requestID string
	length    string // Content-Length, when the answer has one for the sandbox
}

// CopyHeader adds to dst what the sandbox gets of the upstream's headers:
// hop-by-hop headers, cookies, X-Airlock-Code and headers named by a secret
// dropped, every value scrubbed; X-Airlock-Request-Id set, and
// Content-Length for a Body (or a HEAD's). For a Relay, the handshake's
// Sec-WebSocket-Accept and Sec-WebSocket-Protocol alone.
func (a *Answer) CopyHeader(dst http.Header) {
	if a.Relay == nil {
		a.resp.CopyHeader(dst)
	} else {
		for _, name := range []string{"Sec-Websocket-Accept", "Sec-Websocket-Protocol"} {
			if v := a.resp.Header.Get(name); v != "" && !strings.ContainsAny(v, "\r\n") {
				dst.Set(name, a.resp.Scrub.String(v))
			}
		}
	}
	if vs := dst["X-Airlock-Request-Id"]; len(vs) != 1 || vs[0] != a.requestID { // set already by a door that sets it on every answer
		dst["X-Airlock-Request-Id"] = []string{a.requestID} // the upstream's own is not passed on
	}
	if a.length != "" {
		dst["Content-Length"] = []string{a.length}
	}
}

// Relay is an upstream's WebSocket connection, for the door to relay
// frame by frame, scrubbing each message it passes to the sandbox.
type Relay struct {
	Conn  io.ReadWriteCloser
	Scrub *upstream.Scrubber
	// MaxMessage bounds a message (the upstream's max_body).
	MaxMessage int64
	// Done is closed when the call's standing ends (the session's kill or
	// expiry, its grant's, the kill-switch): the relay ends with it.
	Done <-chan struct{}
	// Cut is the code of what ended the call's standing, or "".
	Cut func() string
}

// Written is what a door wrote of an Answer.
type Written struct {
	Bytes   int64  // of the answer's content the sandbox got (a relay: upstream to sandbox)
	BytesIn int64  // a relay's sandbox to upstream
	Err     error  // the write broke off (the client left, the upstream's stream broke); with a 5xx Status, why (its cause)
	Code    string // a relay's end, when not clean ("client_gone", ...)
	Status  int    // what the door answered instead of the Answer's status (a relay it could not start), or 0
}

// Errors of the pipeline's WebSocket rules.
var (
	errWebSocketRule  = fmt.Errorf("%w: no rule allows a WebSocket upgrade here (a GET rule with websocket: true)", grants.ErrBadRequest)
	errWebSocketGated = fmt.Errorf("%w: a WebSocket upgrade cannot wait for a human", grants.ErrBadRequest)
)

// smallBody is the size under which an answer is read, scrubbed and
// answered whole, with a Content-Length; larger ones stream.
const smallBody = 256 << 10

// Do runs one sandbox call and gives write its outcome (see Outcome),
// except when the client went away before there was one to give. When
// write returns, the outcome is recorded: a refusal's before, an answer's
// completion after, with what write says it wrote.
func (b *Broker) Do(ctx context.Context, in Inbound, write func(*Outcome) Written) {
	p := &pipe{b: b, write: write, c: b.newCall(in.Upstream, in.Method)}
	p.ctx = p.c.startTrace(ctx) // a new root: never the sandbox's trace (trace.go)
	defer p.c.endTrace()
	if in.Egress != nil {
		p.c.rec.Path = clip(net.JoinHostPort(in.Egress.Host, strconv.Itoa(in.Egress.Port)), 300)
	}
	req, err := p.c.prepare(in)
	if err != nil {
		p.refuse(err)
		return
	}
	if req.MCP != nil && p.mcpStart(req) {
		return
	}
	c := p.c
	wait := in.Wait
	if c.wait != nil {
		wait = *c.wait
	}
	if err := c.authorize(req); err != nil {
		if req.WebSocket && errors.Is(err, grants.ErrNoMatchingGrant) {
			err = errWebSocketRule
		}
		p.refuse(err)
		return
	}
	if !req.WebSocket {
		if c.gated() {
			p.hold(wait)
			return
		}
		p.forward(false)
		return
	}
	if c.gated() {
		// Grant validation keeps websocket rules ungated; should one be,
		// it is refused, never held.
		c.unreserve()
		p.refuse(errWebSocketGated)
		return
	}
	release, err := c.stream() // a relay holds one of the session's stream slots
	if err != nil {
		p.refuse(err)
		return
	}
	defer release()
	p.relayOrForward(release)
}

// pipe is one run of Do.
type pipe struct {
	b      *Broker
	ctx    context.Context
	c      *call
	write  func(*Outcome) Written
	waited time.Duration // how long a held call could wait for the decision
	// unlockHold releases the lock an MCP call holds while it is held or
	// joined (mcpLinks.holdLock), or is nil.
	unlockHold func()
}

// Open admits a proxy-door tunnel (CONNECT): the caller, its destination
// (in.Egress), then the door's open, which claims the tunnel and does what
// the door does with it (answer, hand the connection over). A refusal at
// any step, an error open returns included, is recorded, counted and
// logged like a refused call's, then given to refused (for the door to
// answer, if it still can).
func (b *Broker) Open(ctx context.Context, in Inbound, open func(*Admitted) error, refused func(*Outcome)) {
	p := &pipe{b: b, c: b.newCall(in.Upstream, in.Method), write: func(o *Outcome) Written { refused(o); return Written{} }}
	p.ctx = p.c.startTrace(ctx)
	defer p.c.endTrace()
	if in.Egress != nil {
		p.c.rec.Path = clip(net.JoinHostPort(in.Egress.Host, strconv.Itoa(in.Egress.Port)), 300)
	}
	err := p.c.admitIn(in)
	if err == nil {
		p.c.adm.c = p.c
		err = open(&p.c.adm)
	}
	if err != nil {
		p.refuse(err)
	}
}

// prepare admits the call (see admitIn) and runs the door's parse.
func (c *call) prepare(in Inbound) (*Request, error) {
	if err := c.admitIn(in); err != nil {
		return nil, err
	}
	if in.Parse == nil {
		return nil, errNoParse
	}
	c.adm.c = c
	return in.Parse(&c.adm)
}

// admitIn admits the caller, maps a proxy destination to its upstream and
// finds the upstream.
func (c *call) admitIn(in Inbound) error {
	if in.Refused != nil {
		return in.Refused
	}
	if err := c.admit(in.Caller); err != nil {
		return err
	}
	if in.Check != nil {
		if err := in.Check(); err != nil {
			return err
		}
	}
	if in.Egress != nil {
		if _, err := c.egress(in.Egress.Host, in.Egress.Port, in.Egress.Tunnel); err != nil {
			return err
		}
	}
	u, ok := c.b.upstreams[c.name]
	if !ok {
		return ErrUnknownUpstream
	}
	c.u = u
	return nil
}

// give hands the writer the outcome, kept on the call (no allocation of
// its own), and returns what the writer wrote.
func (p *pipe) give(o Outcome) Written {
	p.c.outcome = o
	return p.write(&p.c.outcome)
}

// errNoParse is a door that gave Do no parse: a bug, refused.
var errNoParse = errors.New("the door gave no parse")

// refuse records a call refused before it was sent (durably, with its
// code and reason), logs and counts it, and gives it to the writer. A
// refusal answered 5xx (a credential, the audit log, this replica) is a
// failure: logged as fail logs one, with its cause.
func (p *pipe) refuse(err error) {
	c := p.c
	k := fault.Of(err)
	code := k.Code()
	if derr := c.refuse(p.ctx, err, code); derr != nil {
		p.b.log.Error("audit of a denied call failed", "request_id", c.rec.RequestID, "cause", fault.Reason(derr))
	}
	if failure(k) {
		p.b.log.Error("call failed", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream,
			"method", c.rec.Method, "path", c.rec.Path, "code", code, "cause", fault.Reason(err))
	} else {
		p.b.log.Info("call denied", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream,
			"method", c.rec.Method, "path", c.rec.Path, "code", code)
	}
	p.b.calls.observe(c.rec.Upstream, "deny", code, c.elapsed())
	p.b.mcpCount(c, "deny")
	p.give(Outcome{RequestID: c.rec.RequestID, Err: err})
}

// fail gives the writer a failure of a call that was not sent (or was
// held), counted as decision (none: not counted again).
func (p *pipe) fail(err error, decision string, held bool) {
	c := p.c
	f := fault.Of(err)
	if decision != "" {
		p.b.calls.observe(c.rec.Upstream, decision, f.Code(), c.elapsed())
		p.b.mcpCount(c, decision)
	}
	if failure(f) {
		// The one line of a failure: its safe cause, never the error's
		// text (a transport's names hosts, and could carry the URL).
		p.b.log.Error("call failed", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream,
			"method", c.rec.Method, "path", c.rec.Path, "code", f.Code(), "cause", fault.Reason(err))
	}
	p.give(Outcome{RequestID: c.rec.RequestID, Err: err, Held: held, Wait: p.waited})
}

// failure reports whether a call answered with kind k failed (a 5xx that
// is no operator's decision: the kill-switch is one), rather than being
// refused: its log line is an error, with the cause.
func failure(k fault.Kind) bool {
	return k.Status() >= 500 && k != fault.KillswitchEngaged
}

// failSent is fail for a call that was sent: its completion is recorded
// first, with status (what the client got of the upstream: 0 for nothing)
// and, for a failure, its cause as the reason.
func (p *pipe) failSent(err error, decision string, held bool, status int) {
	reason := ""
	if failure(fault.Of(err)) {
		reason = fault.Reason(err)
	}
	p.c.completeWhy(status, 0, fault.Of(err).Code(), reason)
	p.fail(err, decision, held)
}

// hold turns a gated call into a pending action and waits up to wait for
// its decision: the executed answer, the refusal, or still pending.
func (p *pipe) hold(wait time.Duration) {
	c, b := p.c, p.b
	if c.mcp != nil {
		mu := b.mcp.holdLock(c.l.Session.ID + "\x00" + c.mcpJoin())
		mu.Lock()
		unlock := sync.OnceFunc(mu.Unlock)
		defer unlock()
		p.unlockHold = unlock
	}
	a, joined := c.mcpJoined(p.ctx)
	if !joined {
		var err error
		a, err = c.hold(p.ctx)
		if errors.Is(err, gate.ErrTooManyPending) { // a refusal like any other: audited with its code
			p.refuse(err)
			return
		}
		if err != nil {
			p.fail(err, "deny", false)
			return
		}
	}
	if p.unlockHold != nil {
		p.unlockHold() // held (or joined): the next identical call finds it
	}
	b.calls.observe(c.rec.Upstream, "hold", "", c.elapsed())
	b.mcpCount(c, "hold")
	p.waited = wait
	if c.mcp != nil && c.mcp.held != nil && !a.Status.Terminal() {
		c.mcp.held(a.ID)
	}
	var err error
	if wait > 0 {
		ctx, span := c.childSpan(p.ctx, "airlock.await_decision", trace.SpanKindInternal, attrActionID.String(a.ID))
		a, err = b.awaitDecision(ctx, c.l, c.grant, a.ID, wait)
		if c.mcp != nil && p.ctx.Err() != nil && err == nil && a.Status == approval.Pending {
			// An MCP client that cancelled or left before the decision
			// withdraws its call (DESIGN §10).
			b.appr.Withdraw(context.WithoutCancel(p.ctx), a.ID)
		}
		if span != nil {
			span.SetAttributes(attribute.String("airlock.action.status", string(a.Status)))
		}
		endSpan(span, err)
		if err != nil {
			if IsCut(err) {
				// A held call that ended with its session or grant: its outcome says why.
				p.failSent(err, "", true, fault.Of(err).Status())
				return
			}
			p.fail(err, "", true)
			return
		}
	}
	out := Outcome{RequestID: c.rec.RequestID, Held: true, Wait: wait, ActionID: a.ID}
	switch a.Status {
	case approval.Denied, approval.Expired, approval.Failed:
		out.Err = gate.ActionError(a)
	case approval.Executed:
		out.Result = a.Result
	default:
		out.Action = &a
	}
	p.give(out)
}

// awaitDecision waits for up to wait for the decision on action id of
// session l; a kill or the expiry of the session, the revocation or expiry
// of the action's grant g (nil: the session's alone) or the kill-switch
// ends the wait with its error.
func (b *Broker) awaitDecision(ctx context.Context, l *sessions.LiveSession, g *grants.Live, id string, wait time.Duration) (approval.Action, error) {
	ctx, stop := b.BoundTo(ctx, l, g)
	defer stop()
	b.calls.waiters.Inc()
	defer b.calls.waiters.Dec()
	a, err := b.WaitAction(ctx, id, wait)
	cut := Interrupted(ctx)
	if cut == nil && err == nil && a.Status == approval.Denied {
		// Denied at the session's or grant's end, the denial can wake the
		// wait before the end's cancellation reaches ctx: the state says.
		cut = b.ended(l, g)
	}
	if cut != nil && err == nil && (!a.Status.Terminal() || a.Status == approval.Denied) {
		// An action that ran is answered as it finished; one denied by
		// the same end (its session or grant gone) says why.
		err = cut
	}
	return a, err
}

// AwaitAction waits, for a sandbox long-polling its action (GET
// /v1/actions/{id} with Prefer: wait), up to wait for the action's
// decision; the session's end or the kill-switch ends the wait with its
// error.
func (b *Broker) AwaitAction(ctx context.Context, l *sessions.LiveSession, id string, wait time.Duration) (approval.Action, error) {
	return b.awaitDecision(ctx, l, nil, id, wait)
}

// send sends the cleared call; on failure it gives the writer the outcome
// and returns nil.
func (p *pipe) send() *response {
	c := p.c
	resp, err := c.send(p.ctx)
	switch {
	case err == nil:
		return resp
	case errors.Is(err, ErrNoCredential), errors.Is(err, ErrNotSent):
		p.refuse(err)
	case errors.Is(err, ErrNotRecorded):
		p.fail(err, "deny", false)
	case p.ctx.Err() != nil:
		c.complete(0, 0, "client_gone") // nobody to answer
	default:
		p.b.calls.upstream(p.ctx, c.rec.Upstream, 0, time.Since(c.sent))
		p.failSent(err, "error", false, 0)
	}
	return nil
}

// forward sends the call and gives the writer its answer.
func (p *pipe) forward(websocket bool) {
	resp := p.send()
	if resp == nil {
		return
	}
	p.answer(resp, websocket)
}

// relayOrForward sends a WebSocket handshake: a 101 is relayed, any other
// answer is written as forward would (its stream slot given back first:
// it is no relay).
func (p *pipe) relayOrForward(release func()) {
	resp := p.send()
	if resp == nil {
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		release()
		p.answer(resp, true)
		return
	}
	p.relay(resp)
}

// answer gives the writer a sent call's answer, scrubbed, and records its
// outcome.
func (p *pipe) answer(resp *response, websocket bool) {
	if p.c.mcp != nil {
		p.answerMCP(resp)
		return
	}
	c, b := p.c, p.b
	defer resp.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgrade nobody asked for (or that was not relayed): never
		// passed on as it is.
		p.failSent(upstream.ErrUnaskedUpgrade, "error", false, fault.UpstreamError.Status())
		return
	}
	c.answer = Answer{Status: resp.StatusCode, resp: resp, requestID: c.rec.RequestID}
	a := &c.answer
	switch {
	case !hasBody(c.rec.Method, resp.StatusCode):
		if c.rec.Method == http.MethodHead {
			a.length = resp.Header.Get("Content-Length") // the size of what GET would send
		}
	case resp.ContentLength >= 0 && resp.ContentLength <= smallBody:
		body, err := readAnswer(resp.Body, resp.ContentLength)
		if err != nil {
			// Nothing was sent yet: refused in the door's protocol.
			p.failSent(upstream.ReadFailed(err), "error", false, fault.UpstreamError.Status())
			return
		}
		a.Body = resp.Scrub.Bytes(body)
		a.length = strconv.Itoa(len(a.Body))
	default:
		release, err := c.stream() // a streamed answer holds one of the session's stream slots
		if err != nil {
			// Sent, but its answer is not relayed: refused in the door's
			// protocol, the outcome recorded with the refusal's code.
			b.log.Info("streamed answer refused", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream, "code", fault.Of(err).Code())
			p.failSent(err, "deny", false, fault.Of(err).Status())
			return
		}
		defer release()
		a.Stream = resp.Scrub.Reader(resp.Body)
	}
	w := p.give(Outcome{RequestID: c.rec.RequestID, Answer: a})
	upDur := resp.UpstreamTime()
	b.calls.upstream(p.ctx, c.rec.Upstream, resp.StatusCode, upDur)
	code := ""
	if w.Err != nil {
		code = "stream_interrupted"
		if cut := resp.Interrupted(); cut != nil {
			code = fault.Of(cut).Code()
		}
	}
	c.complete(resp.StatusCode, w.Bytes, code)
	b.calls.observe(c.rec.Upstream, "allow", "", c.elapsed()-upDur)
	if b.log.Enabled(p.ctx, slog.LevelDebug) { // no argument boxing on the hot path otherwise
		b.log.Debug("call", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream, "method", c.rec.Method,
			"path", c.rec.Path, "status", resp.StatusCode, "bytes_out", w.Bytes)
	}
}

// relay gives the writer an upgraded WebSocket connection to relay, and
// records its outcome when the relay ends.
func (p *pipe) relay(resp *response) {
	c, b := p.c, p.b
	defer resp.Close()
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || resp.Header.Get("Sec-Websocket-Extensions") != "" {
		// Not a WebSocket, or frames the broker could not read (it asked for no extension).
		p.failSent(upstream.ErrNotWebSocket, "error", false, fault.UpstreamError.Status())
		return
	}
	c.answer = Answer{Status: http.StatusSwitchingProtocols, resp: resp, requestID: c.rec.RequestID}
	a := &c.answer
	cut := func() string { // the problem code of what cut the relay, or ""
		if err := resp.Interrupted(); err != nil {
			return fault.Of(err).Code()
		}
		return ""
	}
	a.Relay = &Relay{Conn: conn, Scrub: resp.Scrub, MaxMessage: c.u.MaxBody, Done: resp.Done(), Cut: cut}
	w := p.give(Outcome{RequestID: c.rec.RequestID, Answer: a})
	status, code, decision := http.StatusSwitchingProtocols, w.Code, "allow"
	if w.Status != 0 {
		status, decision = w.Status, "error"
	}
	if why := cut(); why != "" {
		code = why
	}
	c.rec.BytesIn = w.BytesIn
	if w.Status >= 500 && w.Err != nil {
		// The relay could not start: a failure like any other, its cause
		// in the record and in the one error line.
		c.completeWhy(status, w.Bytes, code, fault.Reason(w.Err))
		b.calls.observe(c.rec.Upstream, decision, code, c.elapsed())
		b.log.Error("call failed", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream,
			"method", c.rec.Method, "path", c.rec.Path, "code", code, "cause", fault.Reason(w.Err))
		return
	}
	c.complete(status, w.Bytes, code)
	b.calls.observe(c.rec.Upstream, decision, code, c.elapsed())
	b.log.Info("websocket relay ended", "request_id", c.rec.RequestID, "session_id", c.sessionID(), "upstream", c.rec.Upstream,
		"path", c.rec.Path, "bytes_in", w.BytesIn, "bytes_out", w.Bytes, "code", code)
}

// hasBody reports whether an answer to method with status carries content.
func hasBody(method string, status int) bool {
	return method != http.MethodHead && status != http.StatusNoContent && status != http.StatusNotModified
}

// readAnswer reads a small answer of announced length n into one buffer
// of that size (no regrowing and copying as io.ReadAll does), at most n+1
// bytes as io.ReadAll(io.LimitReader(r, n+1)) would. n is at most
// smallBody: the buffer is bounded whatever the upstream announces.
func readAnswer(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, n+1)
	for len(buf) < cap(buf) {
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF { // as io.ReadAll: the end, not a wrapped error
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
