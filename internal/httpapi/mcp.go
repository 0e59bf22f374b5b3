package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/mcp"
)

// The MCP door (DESIGN §10): POST /v1/mcp/{upstream} takes one JSON-RPC
// message of a sandbox's MCP client, parsed strictly, and hands it to the
// call pipeline (broker.Do); it writes the outcome as a JSON-RPC answer,
// as JSON or, when a call is held for a human, as an SSE stream kept
// alive. Both protocol eras: the session-based (2025-06-18, 2025-11-25:
// initialize, the broker's own Mcp-Session-Id, DELETE) and the stateless
// 2026-07-28 (_meta versions, Mcp-Method and Mcp-Name checked against the
// body, server/discover). The proxy door serves an MCP upstream's host the
// same way (mcpServe).

// Errors of the MCP door.
var (
	errMCPBatch        = fault.New(fault.BadRequest, "a JSON-RPC batch is not accepted: send one message per request")
	errMCPResponse     = fault.New(fault.BadRequest, "the broker asked the client nothing: a JSON-RPC response is not accepted")
	errMCPNoSession    = fault.New(fault.BadRequest, "Mcp-Session-Id is required after initialize (or speak the stateless 2026-07-28 protocol)")
	errMCPSession      = fault.Hidden(fault.NotFound, "unknown MCP session: initialize again")
	errMCPMediaType    = fault.New(fault.BadRequest, "an MCP message is sent as application/json")
	errMCPHeader       = fault.New(fault.BadRequest, "the Mcp-Method or Mcp-Name header does not match the message")
	errMCPGetStream    = fault.Hidden(fault.MethodNotAllowed, "the broker offers a GET stream only on a session (Mcp-Session-Id)")
	errMCPAcceptStream = fault.New(fault.BadRequest, "a GET stream is asked for with Accept: text/event-stream")
	errMCPNotification = errors.New("notification")
)

// mcpKeepAlive is how often a held call's stream gets a keep-alive.
const mcpKeepAlive = 15 * time.Second

// mcpSessions is this replica's part of the door's sessions (the session
// era's Mcp-Session-Id, which the broker makes and reads alike on every
// replica: broker.OpenMCPSession): the ids a DELETE ended here, until
// they would have expired, and the calls in flight on each, for
// notifications/cancelled.
type mcpSessions struct {
	mu       sync.Mutex
	ended    map[string]time.Time
	inflight map[string]map[string]context.CancelFunc // by session id, then by JSON-RPC id (or "listen N" for a GET stream)
	listens  atomic.Uint64                            // numbers the GET streams' entries in inflight
}

// mcpSession is a door session a request is on.
type mcpSession struct {
	id, version string
	expires     time.Time
}

// maxEnded bounds the ended ids kept: at it, the expired are forgotten,
// and if that is not a quarter, arbitrary others until it is (an ended id
// is no credential: a request on it still needs its session token; the
// walk happens once per quarter of the bound, not per DELETE).
const maxEnded = 1 << 16

// get is session id if it belongs to Airlock session airlock on upstream
// and was not ended here.
func (m *mcpSessions) get(b *broker.Broker, id, airlock, upstreamName string) (*mcpSession, bool) {
	version, expires, ok := b.MCPSession(id, airlock, upstreamName)
	if !ok {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, gone := m.ended[id]; gone {
		return nil, false
	}
	return &mcpSession{id: id, version: version, expires: expires}, true
}

// end ends session s (DELETE): its calls in flight here are cancelled.
func (m *mcpSessions) end(s *mcpSession) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended == nil {
		m.ended = map[string]time.Time{}
	}
	if len(m.ended) >= maxEnded {
		now := time.Now()
		for id, exp := range m.ended {
			if now.After(exp) || len(m.ended) > maxEnded*3/4 {
				delete(m.ended, id)
			}
		}
	}
	m.ended[s.id] = s.expires
	for _, cancel := range m.inflight[s.id] {
		cancel()
	}
	delete(m.inflight, s.id)
}

// track registers a call in flight on the session, for its cancellation;
// the returned func forgets it.
func (m *mcpSessions) track(s *mcpSession, id string, cancel context.CancelFunc) func() {
	m.mu.Lock()
	if m.inflight == nil {
		m.inflight = map[string]map[string]context.CancelFunc{}
	}
	calls := m.inflight[s.id]
	if calls == nil {
		calls = map[string]context.CancelFunc{}
		m.inflight[s.id] = calls
	}
	calls[id] = cancel
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if calls := m.inflight[s.id]; calls != nil {
			delete(calls, id)
			if len(calls) == 0 {
				delete(m.inflight, s.id)
			}
		}
	}
}

// cancel cancels the call id in flight on the session (on this replica).
func (m *mcpSessions) cancel(s *mcpSession, id string) {
	m.mu.Lock()
	cancel := m.inflight[s.id][id]
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// mcpPost is POST /v1/mcp/{upstream}.
func (s *Server) mcpPost(w http.ResponseWriter, r *http.Request) {
	s.mcpServe(w, r, chi.URLParam(r, "upstream"), nil, bearerCaller)
}

// mcpDelete is DELETE /v1/mcp/{upstream}: the end of a broker MCP session.
func (s *Server) mcpDelete(w http.ResponseWriter, r *http.Request) {
	s.mcpServe(w, r, chi.URLParam(r, "upstream"), nil, bearerCaller)
}

// mcpGet is GET /v1/mcp/{upstream}: on a broker MCP session, the stream
// of the session's tool list changes (notifications/tools/list_changed
// alone); without one, 405, which clients take as no stream.
func (s *Server) mcpGet(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(mcp.HeaderSessionID) == "" {
		w.Header().Set("Allow", "POST, DELETE")
		writeProblemOf(w, errMCPGetStream, "")
		return
	}
	s.mcpServe(w, r, chi.URLParam(r, "upstream"), nil, bearerCaller)
}

// bearerCaller is the caller of a bearer-token request, or its refusal.
func bearerCaller(r *http.Request) (broker.Caller, error) {
	if tok, ok := bearer(r); ok {
		return broker.BearerCaller(tok, remoteAddr(r)), nil
	}
	return broker.Caller{}, errMissingToken
}

// mcpExchange is one MCP request on the door: what its parse learned,
// for its writer.
type mcpExchange struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	msg     *mcp.Message // the message, once parsed
	session *mcpSession  // the broker MCP session it is on (the session era), or nil
	// admSession and admUpstream are the admitted caller's session and
	// the upstream, for the session an initialize opens.
	admSession, admUpstream string
	cancel                  context.CancelFunc
	untrack                 func()

	mu       sync.Mutex // guards the stream against the keep-alive
	stream   *mcp.SSEWriter
	stopKeep chan struct{}
	done     bool
}

// mcpServe serves one MCP request for upstream name (egress: the proxy
// door's destination, nil on the broker's endpoint).
func (s *Server) mcpServe(w http.ResponseWriter, r *http.Request, name string, egress *broker.Egress, caller func(*http.Request) (broker.Caller, error)) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	x := &mcpExchange{s: s, w: w, r: r, cancel: cancel}
	defer x.stop()
	in := broker.Inbound{Upstream: name, Method: r.Method, Egress: egress, Wait: s.mcpWait}
	c, err := caller(r)
	in.Caller, in.Refused = c, err
	in.Parse = x.parse
	s.b.Do(ctx, in, x.write)
}

// parse reads the admitted request's message (see readMCP).
func (x *mcpExchange) parse(a *broker.Admitted) (*broker.Request, error) {
	// Set now: a held call's, a progress's or the GET stream's answer
	// starts before the outcome is written.
	x.w.Header().Set("X-Airlock-Request-Id", a.RequestID())
	switch x.r.Method {
	case http.MethodDelete:
		return x.deleteSession(a)
	case http.MethodGet:
		return x.listenSession(a)
	}
	msg, err := readMCP(x.r, a.Upstream().MaxBody)
	if err != nil {
		return nil, err
	}
	x.msg = msg
	x.admSession, x.admUpstream = a.SessionID(), a.Upstream().Name
	version, err := x.era(a, msg)
	if err != nil {
		return nil, err
	}
	m := &broker.MCPRequest{Method: msg.Method, Version: version, Held: x.held}
	req := &broker.Request{MCP: m}
	switch {
	case msg.IsNotification():
		if msg.Method == "notifications/cancelled" && x.session != nil {
			if id, ok := mcp.CancelledID(msg); ok {
				x.s.mcp.cancel(x.session, id)
			}
		}
		return req, nil
	case msg.Method == "tools/call":
		tool, args, err := msg.ToolCall()
		if err != nil {
			return nil, mcpBad(err)
		}
		req.Tool, req.Body, req.BodyJSON, req.HasBody = tool, args, true, true
		if _, ok := msg.ProgressToken(); ok && acceptsSSE(x.r) {
			m.Progress = x.progress
		}
	case msg.Method == "tools/list":
		m.Cursor, _ = msg.Params["cursor"].(string)
	}
	if x.session != nil && !msg.IsNotification() {
		x.untrack = x.s.mcp.track(x.session, msg.ID.String(), x.cancel)
	}
	return req, nil
}

// era checks the message against its protocol era and returns the
// version the sandbox speaks: the stateless era's headers must match the
// body; the session era's messages after initialize must name a session
// of this Airlock session.
func (x *mcpExchange) era(a *broker.Admitted, msg *mcp.Message) (string, error) {
	// Each MCP header at most once: a reader in front of the broker that
	// takes another of repeated values would see another era or session.
	for _, name := range []string{mcp.HeaderProtocolVersion, mcp.HeaderSessionID, mcp.HeaderMethod, mcp.HeaderName} {
		if len(x.r.Header.Values(name)) > 1 {
			return "", errMCPHeader
		}
	}
	if v, _ := msg.MetaVersion(); mcp.Stateless(v) || mcp.Stateless(x.r.Header.Get(mcp.HeaderProtocolVersion)) {
		if x.r.Header.Get(mcp.HeaderMethod) != msg.Method {
			return "", errMCPHeader
		}
		if want, named := msg.HeaderName(); named && x.r.Header.Get(mcp.HeaderName) != want {
			return "", errMCPHeader
		}
		return mcp.V20260728, nil
	}
	if msg.Method == "initialize" {
		v, _ := msg.Params["protocolVersion"].(string)
		return v, nil
	}
	id := x.r.Header.Get(mcp.HeaderSessionID)
	if id == "" {
		return "", errMCPNoSession
	}
	sess, ok := x.s.mcp.get(x.s.b, id, a.SessionID(), a.Upstream().Name)
	if !ok {
		return "", errMCPSession
	}
	x.session = sess
	return sess.version, nil
}

// deleteSession ends the request's broker MCP session (DELETE).
func (x *mcpExchange) deleteSession(a *broker.Admitted) (*broker.Request, error) {
	id := x.r.Header.Get(mcp.HeaderSessionID)
	sess, ok := x.s.mcp.get(x.s.b, id, a.SessionID(), a.Upstream().Name)
	if !ok {
		return nil, errMCPSession
	}
	x.s.mcp.end(sess)
	return &broker.Request{MCP: &broker.MCPRequest{}}, nil
}

// listenSession opens the request's broker MCP session's GET stream: the
// session must be the caller's, and the client must take an SSE stream.
// A DELETE of the session ends the stream.
func (x *mcpExchange) listenSession(a *broker.Admitted) (*broker.Request, error) {
	id := x.r.Header.Get(mcp.HeaderSessionID)
	if id == "" { // the stateless era has no GET stream (the proxy door's request)
		x.w.Header().Set("Allow", "POST, DELETE")
		return nil, errMCPGetStream
	}
	if !acceptsSSE(x.r) {
		return nil, errMCPAcceptStream
	}
	sess, ok := x.s.mcp.get(x.s.b, id, a.SessionID(), a.Upstream().Name)
	if !ok {
		return nil, errMCPSession
	}
	x.untrack = x.s.mcp.track(sess, "listen "+strconv.FormatUint(x.s.mcp.listens.Add(1), 10), x.cancel)
	return &broker.Request{MCP: &broker.MCPRequest{Method: broker.MCPListen, Version: sess.version}}, nil
}

// readMCP reads one strictly parsed JSON-RPC message of at most limit
// bytes: a batch, a response or a body that is not one JSON object is
// refused (400).
func readMCP(r *http.Request, limit int64) (*mcp.Message, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, errMCPMediaType
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		if errors.Is(err, errBodyStalled) {
			return nil, errBodyStalled
		}
		return nil, errors.Join(grants.ErrBadRequest, errors.New("could not read the request body"))
	}
	if int64(len(body)) > limit {
		return nil, errBodyTooLarge
	}
	msg, err := mcp.Parse(body)
	switch {
	case errors.Is(err, mcp.ErrBatch):
		return nil, errMCPBatch
	case err != nil:
		return nil, mcpBad(err)
	case msg.IsResponse():
		return nil, errMCPResponse
	}
	return msg, nil
}

// mcpBad is a malformed message's refusal.
func mcpBad(err error) error {
	if fault.Find(err) != nil {
		return err
	}
	return fmt.Errorf("%w: %w", grants.ErrBadRequest, err)
}

// held starts, once a call is held for a human, the SSE stream that keeps
// the client waiting: a keep-alive comment every mcpKeepAlive, and a
// progress notification when the client gave a progressToken.
func (x *mcpExchange) held(actionID string) {
	if !acceptsSSE(x.r) {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stream != nil || x.done {
		return
	}
	x.w.Header().Set("X-Airlock-Action-Id", actionID)
	x.startStream("held for a human reviewer")
	x.stopKeep = make(chan struct{})
	token, hasToken := x.msg.ProgressToken()
	go x.keepAlive(x.stopKeep, actionID, token, hasToken)
}

// startStream answers the request with an SSE stream, its first comment
// saying why. The caller holds x.mu.
func (x *mcpExchange) startStream(why string) {
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	x.w.WriteHeader(http.StatusOK)
	x.stream = mcp.NewSSEWriter(x.w)
	_ = x.stream.Comment(why)
}

// progress relays a tools/call's progress as the server reported it
// (scrubbed) under the client's own progressToken, on the answer's SSE
// stream (started by the first).
func (x *mcpExchange) progress(p broker.Progress) {
	token, ok := x.msg.ProgressToken()
	if !ok {
		return
	}
	params := map[string]any{"progressToken": token, "progress": p.Progress}
	if p.Total > 0 {
		params["total"] = p.Total
	}
	if p.Message != "" {
		params["message"] = p.Message
	}
	note, err := mcp.EncodeNotification("notifications/progress", params)
	if err != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done {
		return
	}
	if x.stream == nil {
		x.startStream("the tool reports its progress")
	}
	_ = x.stream.Event(note)
}

// listen writes the GET stream: notifications/tools/list_changed for each
// change, a keep-alive every mcpKeepAlive, until the session's standing
// ends, the session is deleted or the client leaves.
func (x *mcpExchange) listen(a *broker.MCPAnswer) broker.Written {
	note, err := mcp.EncodeNotification("notifications/tools/list_changed", nil)
	if err != nil {
		return broker.Written{Err: err}
	}
	x.mu.Lock()
	x.startStream("tool list changes")
	stream := x.stream
	x.mu.Unlock()
	t := time.NewTicker(mcpKeepAlive)
	defer t.Stop()
	var n int64
	for {
		var err error
		select {
		case <-a.Changes:
			err = stream.Event(note)
			n += int64(len(note))
		case <-t.C:
			err = stream.Comment("keep-alive")
		case <-a.Done:
			return broker.Written{Bytes: n}
		case <-x.r.Context().Done():
			return broker.Written{Bytes: n}
		}
		if err != nil {
			return broker.Written{Bytes: n, Err: err}
		}
	}
}

// keepAlive writes keep-alives (and progress) until stop.
func (x *mcpExchange) keepAlive(stop <-chan struct{}, actionID string, token any, hasToken bool) {
	t := time.NewTicker(mcpKeepAlive)
	defer t.Stop()
	n := 0
	for {
		if hasToken {
			n++
			note, err := mcp.EncodeNotification("notifications/progress", map[string]any{
				"progressToken": token, "progress": n,
				"message": "Waiting for a human reviewer to approve this call (Airlock action " + actionID + ")",
			})
			x.mu.Lock()
			if err == nil && !x.done {
				_ = x.stream.Event(note)
			}
			x.mu.Unlock()
		}
		select {
		case <-t.C:
			x.mu.Lock()
			if !x.done {
				_ = x.stream.Comment("keep-alive")
			}
			x.mu.Unlock()
		case <-stop:
			return
		}
	}
}

// stop ends the keep-alive and forgets the call in flight.
func (x *mcpExchange) stop() {
	x.mu.Lock()
	x.done = true
	if x.stopKeep != nil {
		close(x.stopKeep)
		x.stopKeep = nil
	}
	x.mu.Unlock()
	if x.untrack != nil {
		x.untrack()
	}
}

// acceptsSSE reports whether the client takes an SSE stream.
func acceptsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// write writes the call's outcome as the JSON-RPC answer to the message.
func (x *mcpExchange) write(out *broker.Outcome) broker.Written {
	h := x.w.Header()
	h.Set("X-Airlock-Request-Id", out.RequestID)
	switch {
	case out.Err != nil:
		return x.refusal(out)
	case out.Action != nil:
		h.Set("X-Airlock-Action-Id", out.Action.ID)
		return x.result(pendingResult(*out.Action))
	case out.Result != nil:
		ans, err := broker.MCPStoredAnswer(out.Result.Body)
		if err != nil {
			return x.jsonrpcError(http.StatusOK, err, out.RequestID)
		}
		return x.answer(ans)
	}
	a := out.Answer
	if a.MCP != nil && a.MCP.Changes != nil {
		return x.listen(a.MCP)
	}
	if a.Status == http.StatusAccepted || x.msg == nil { // a notification, a DELETE
		status := http.StatusAccepted
		if x.r.Method == http.MethodDelete {
			status = http.StatusNoContent
		}
		x.w.WriteHeader(status)
		return broker.Written{}
	}
	if x.msg.Method == "initialize" && a.MCP.Result != nil {
		version, _ := a.MCP.Result["protocolVersion"].(string)
		id := x.s.b.OpenMCPSession(x.admSession, x.admUpstream, version)
		h.Set(mcp.HeaderSessionID, id)
	}
	return x.answer(a.MCP)
}

// answer writes a result or the server's error.
func (x *mcpExchange) answer(a *broker.MCPAnswer) broker.Written {
	if a.Error != nil {
		data, _ := a.Error.Data.(map[string]any) // a server's data that is no object is dropped
		body, err := mcp.EncodeError(x.msg.ID, a.Error.Code, a.Error.Message, data)
		if err != nil {
			return x.jsonrpcError(http.StatusOK, err, "")
		}
		return x.send(http.StatusOK, body)
	}
	return x.result(a.Result)
}

// result writes a result.
func (x *mcpExchange) result(result map[string]any) broker.Written {
	body, err := mcp.EncodeResult(x.msg.ID, result)
	if err != nil {
		return x.jsonrpcError(http.StatusOK, fmt.Errorf("%w: the result cannot be encoded", broker.ErrMCPUpstream), "")
	}
	return x.send(http.StatusOK, body)
}

// send writes one message: an event on the stream once it started, else
// a JSON body.
func (x *mcpExchange) send(status int, body []byte) broker.Written {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.done = true
	if x.stream != nil {
		err := x.stream.Event(body)
		return broker.Written{Bytes: int64(len(body)), Err: err}
	}
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	x.w.WriteHeader(status)
	n, err := x.w.Write(body)
	return broker.Written{Bytes: int64(n), Err: err}
}

// refusal writes a refused or failed call: an authentication failure as
// 401, a malformed message or a header mismatch as 400, an unknown
// session as 404, a held call's denial as a tool error naming its action,
// and every other refusal as a JSON-RPC error (HTTP 200).
func (x *mcpExchange) refusal(out *broker.Outcome) broker.Written {
	k := fault.Of(out.Err)
	switch {
	case k == fault.InvalidToken || k == fault.SessionExpired || k == fault.SessionRevoked || k == fault.InvalidSignature || k == fault.ProxyAuthRequired:
		x.w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
		return x.jsonrpcError(http.StatusUnauthorized, out.Err, out.RequestID)
	case errors.Is(out.Err, errMCPSession):
		return x.jsonrpcError(http.StatusNotFound, out.Err, out.RequestID)
	case x.msg == nil || k == fault.BadRequest || k == fault.BodyTooLarge || k == fault.RequestTimeout:
		return x.jsonrpcError(k.Status(), out.Err, out.RequestID)
	case out.Held && (k == fault.ApprovalDenied || k == fault.ApprovalExpired || k == fault.ActionFailed || k == fault.ToolChanged):
		return x.result(deniedResult(out))
	}
	return x.jsonrpcError(http.StatusOK, out.Err, out.RequestID)
}

// jsonrpcError writes err as a JSON-RPC error: -32602 for an argument's
// refusal, the protocol's codes for a malformed message, -32020 for a
// header mismatch, -32010 for every other refusal; the Airlock code in
// error.data.code.
func (x *mcpExchange) jsonrpcError(status int, err error, requestID string) broker.Written {
	p := problemFor(err)
	code := mcp.CodeRefused
	switch {
	case errors.Is(err, errMCPHeader):
		code = mcp.CodeHeaderMismatch
	case p.kind == fault.ConstraintViolated:
		code = mcp.CodeArgument
	case p.kind == fault.BadRequest && (x.msg == nil || errors.Is(err, mcp.ErrInvalidParams) || errors.Is(err, mcp.ErrInvalidRequest)):
		code = mcp.CodeInvalidRequest // a malformed message
	}
	data := map[string]any{"code": p.Code}
	if requestID != "" {
		data["request_id"] = requestID
	}
	if p.Param != "" {
		data["param"], data["constraint"] = p.Param, p.Constraint
	}
	var id mcp.ID
	if x.msg != nil {
		id = x.msg.ID
	}
	body, eerr := mcp.EncodeError(id, code, p.Detail, data)
	if eerr != nil {
		body = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}`)
	}
	if status == http.StatusOK || x.stream != nil {
		return x.send(http.StatusOK, body)
	}
	x.mu.Lock()
	x.done = true
	x.mu.Unlock()
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Airlock-Code", p.Code)
	x.w.WriteHeader(status)
	n, werr := x.w.Write(body)
	return broker.Written{Bytes: int64(n), Err: werr}
}

// pendingResult is a held call's answer while its action waits: a tool
// error whose text names the action (an identical retry joins it).
func pendingResult(a approval.Action) map[string]any {
	text := "Airlock is holding this call for a human reviewer: action " + a.ID + " is pending until " +
		a.ExpiresAt.UTC().Format(time.RFC3339) + ". Call the tool again with the same arguments to get its result once approved."
	return toolError(text, map[string]any{"code": "approval_pending", "action_id": a.ID})
}

// deniedResult is a held call that was refused: a tool error naming the
// action and why (approval_denied, approval_expired, ...).
func deniedResult(out *broker.Outcome) map[string]any {
	p := problemFor(out.Err)
	id := out.ActionID
	text := fmt.Sprintf("Airlock refused this call (%s): %s", p.Code, p.Detail)
	if id != "" {
		text = fmt.Sprintf("Airlock action %s: %s (%s)", id, p.Detail, p.Code)
	}
	return toolError(text, map[string]any{"code": p.Code, "action_id": id})
}

// toolError is a CallToolResult with isError and one text content.
func toolError(text string, airlock map[string]any) map[string]any {
	return map[string]any{
		"content": []any{map[string]any{"type": "text", "text": text}},
		"isError": true,
		"_meta":   map[string]any{"airlock": airlock},
	}
}
