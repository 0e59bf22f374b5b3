package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/mcp"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// MCP calls through the one pipeline (DESIGN §10). The MCP door parses a
// JSON-RPC message into a Request whose MCP part says what was asked; Do
// runs it as any call: admitted, then, for a tools/call, the tool resolved
// on the session's view of the server (pinned digests), the arguments
// judged by the grants (Call.Tool, Call.Body = the arguments), gated,
// recorded, sent re-serialized from what was checked, and its result
// scrubbed in every part. The other methods use no grant: initialize,
// ping and server/discover are answered by the broker itself, tools/list
// from the server's tools filtered and narrowed by the session's rules;
// any other method is refused.

// MCPRequest is what the MCP door parsed of a message, beyond the grants'
// call (Request.MCP): for a tools/call, Call.Tool and Call.Body (the
// arguments) carry the rest.
type MCPRequest struct {
	Method string
	// Version is the protocol version the sandbox speaks (initialize's, or
	// the stateless era's _meta).
	Version string
	// Cursor is a tools/list's cursor (the broker's own), or "".
	Cursor string
	// Held, when set, is told the action id once a tools/call is held for
	// a human (the door may then keep the client's stream alive).
	Held func(actionID string)
	// Progress, when set, is told a tools/call's progress as the server
	// reports it (the client gave a progressToken): the broker asks the
	// server for it under a token of its own.
	Progress func(Progress)
}

// MCPAnswer is an MCP answer for the sandbox, scrubbed: a result or a
// JSON-RPC error (the server's), or, for a notification, neither (the
// door answers 202).
type MCPAnswer struct {
	Result map[string]any
	Error  *mcp.WireError
	// Changes, for the GET stream (MCPListen), tells each change of the
	// tools the session may list, until Done.
	Changes <-chan struct{}
	Done    <-chan struct{}
}

// The MCP methods the pipeline knows.
const (
	mcpToolsCall  = "tools/call"
	mcpToolsList  = "tools/list"
	mcpInitialize = "initialize"
	mcpPing       = "ping"
	mcpDiscover   = "server/discover"
)

// kindMCP is the kind of an MCP upstream.
const kindMCP = "mcp"

// mcpServerVersion is the version the broker gives as an MCP server.
const mcpServerVersion = "1"

// ErrMCPMethod: a method no rule kind allows (tools only, for now).
var ErrMCPMethod = fault.New(fault.NoMatchingGrant, "no rule kind allows this MCP method (tools/call and tools/list only)")

// errNotMCP: an MCP message for an upstream that is not an MCP server.
var errNotMCP = fmt.Errorf("%w: this upstream is not an MCP server", grants.ErrBadRequest)

// callMCP is an MCP call's state on its call.
type callMCP struct {
	method string
	tool   mcp.Tool // the tool called, as the session saw it
	args   string   // hex SHA-256 of the arguments as forwarded (JCS)
	id     mcp.ID   // the broker's JSON-RPC id upstream
	x      *mcpExchange
	held   func(string)
	// progress is told the call's progress (MCPRequest.Progress).
	progress func(Progress)
	// constrained are the constrained arguments' values as JCS text (the
	// decision's, or an executed action's as held).
	constrained map[string]string
	isErr       bool
	redact      int
}

// mcpStart runs an MCP message's own steps after the door's parse: every
// method but tools/call is answered here (true: done); a tools/call's
// tool is resolved, and the call goes on through the grants (false).
func (p *pipe) mcpStart(req *Request) (done bool) {
	c := p.c
	m := req.MCP
	c.rec.Method = clip(m.Method, 32)
	if c.u.Kind != kindMCP {
		p.refuse(errNotMCP)
		return true
	}
	c.mcp = &callMCP{method: m.Method, held: m.Held, progress: m.Progress}
	switch m.Method {
	case MCPListen:
		p.mcpListen()
		return true
	case mcpInitialize, mcpPing, mcpDiscover:
		p.give(Outcome{RequestID: c.rec.RequestID, Answer: p.mcpLocal(m)})
		return true
	case mcpToolsList:
		p.mcpList(m)
		return true
	case mcpToolsCall:
	default:
		if m.Method == "" || mcp.IsNotificationMethod(m.Method) { // "": the end of the door's own session (DELETE)
			p.give(Outcome{RequestID: c.rec.RequestID, Answer: &Answer{Status: http.StatusAccepted, MCP: &MCPAnswer{}, requestID: c.rec.RequestID}})
			return true
		}
		p.refuse(ErrMCPMethod)
		return true
	}
	c.mcp.tool.Name = req.Tool
	if !namesTool(c.b.toolRules(c.l, c.u.Name), req.Tool) {
		// Refused before the server is asked anything: a tool no rule
		// names is not told apart from one the server does not have.
		p.refuse(grants.ErrNoMatchingGrant)
		return true
	}
	link := c.b.mcp.link(c.l.Session.ID, c.u)
	link.mu.Lock()
	listed := link.cat.listed
	link.mu.Unlock()
	x := &mcpExchange{b: c.b, u: c.u, link: link, l: c.l}
	if !listed { // the tools are read first, with the credential (the call's own is fetched when it is sent)
		var err error
		if x, err = p.exchange(); err != nil {
			p.refuse(err)
			return true
		}
	}
	t, err := c.b.toolFor(p.ctx, c.l, x, req.Tool)
	if err != nil {
		p.refuse(err)
		return true
	}
	c.mcp.tool = t
	return false
}

// namesTool reports whether a rule names tool.
func namesTool(rules []grants.ToolRule, tool string) bool {
	for _, r := range rules {
		if r.Tool == tool {
			return true
		}
	}
	return false
}

// exchange is the call's exchange with its MCP upstream: the session's
// link and the credential (fetched here: listing needs it before the
// grants are asked).
func (p *pipe) exchange() (*mcpExchange, error) {
	c := p.c
	cred, err := c.b.creds.Credential(p.ctx, c.l, c.u)
	if err != nil {
		return nil, &stepError{step: ErrNoCredential, cause: err}
	}
	return &mcpExchange{b: c.b, u: c.u, cred: cred, link: c.b.mcp.link(c.l.Session.ID, c.u), l: c.l}, nil
}

// mcpLocal is the broker's own answer to initialize, ping and
// server/discover: it is the server the sandbox talks to, and declares
// tools alone (no sampling, elicitation or roots asked of the client); the
// session era's tools list changes on the GET stream (mcpnotify.go).
func (p *pipe) mcpLocal(m *MCPRequest) *Answer {
	info := map[string]any{"name": "airlock", "version": mcpServerVersion}
	caps := map[string]any{"tools": map[string]any{}}
	var result map[string]any
	switch m.Method {
	case mcpInitialize:
		caps = map[string]any{"tools": map[string]any{"listChanged": true}}
		result = map[string]any{"protocolVersion": mcp.Negotiate(m.Version), "capabilities": caps, "serverInfo": info}
	case mcpDiscover:
		result = mcp.DiscoverResult(caps, info)
	default:
		result = map[string]any{}
	}
	return &Answer{Status: http.StatusOK, MCP: &MCPAnswer{Result: result}, requestID: p.c.rec.RequestID}
}

// mcpList answers tools/list: the server's tools (every page, re-read:
// each listing is a chance to see a changed tool) that some rule of the
// session's live grants allows, narrowed, re-paginated with the broker's
// cursors; audited mcp.list with the tools shown and hidden.
func (p *pipe) mcpList(m *MCPRequest) {
	c := p.c
	rules := c.b.toolRules(c.l, c.u.Name)
	if len(rules) == 0 {
		p.refuse(grants.ErrNoMatchingGrant)
		return
	}
	x, err := p.exchange()
	if err != nil {
		p.refuse(err)
		return
	}
	if err := c.b.listTools(p.ctx, c.l, x); err != nil {
		p.mcpFailed(err)
		return
	}
	shown, names, hidden := c.b.shownTools(x, rules)
	tools, next, err := page(shown, m.Cursor)
	if err != nil {
		p.refuse(err)
		return
	}
	result := map[string]any{"tools": toAny(tools)}
	if next != "" {
		result["nextCursor"] = next
	}
	ev := callEvent(c.l, c.rec)
	ev.Type, ev.Decision = audit.TypeMCPList, "allow"
	ev.MCP = &audit.MCP{Shown: clipAll(names), Hidden: hidden}
	c.b.audit.AppendAsync(ev)
	c.b.calls.observe(c.rec.Upstream, "allow", "", c.elapsed())
	p.give(Outcome{RequestID: c.rec.RequestID, Answer: &Answer{Status: http.StatusOK, MCP: &MCPAnswer{Result: result}, requestID: c.rec.RequestID}})
}

// mcpFailed gives the writer an MCP exchange's failure that sent no call
// of the sandbox's (a listing, opening the session).
func (p *pipe) mcpFailed(err error) {
	if upErr, ok := err.(*mcpError); ok {
		err = fmt.Errorf("%w: the MCP server refused the listing (error %d)", ErrMCPUpstream, upErr.wire.Code)
	}
	p.refuse(err)
}

// mcpOutbound builds a tools/call's request to the server from what was
// checked: the tool and the arguments as decided (pins filled in), under
// the broker's own id; the link's session headers are set when it is sent.
func (c *call) mcpOutbound(req *Request, d *grants.Decision) (*upstream.Outbound, error) {
	args, _ := d.Body.(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	sum, err := mcp.ArgsSHA256(args)
	if err != nil {
		return nil, fmt.Errorf("%w: the arguments cannot be canonicalized", grants.ErrBadRequest)
	}
	c.mcp.args, c.mcp.constrained = sum, constrainedText(d.Constrained())
	c.mcp.id = c.b.mcp.nextID()
	var meta map[string]any
	if c.mcp.progress != nil { // the broker's own token: the call's id upstream
		meta = map[string]any{"progressToken": json.Number(c.mcp.id.String())}
	}
	body, err := mcp.EncodeRequest(c.mcp.id, mcpToolsCall, mcp.ToolCallParams(req.Tool, args), meta)
	if err != nil {
		return nil, fmt.Errorf("%w: the call cannot be encoded", grants.ErrBadRequest)
	}
	return &upstream.Outbound{Method: http.MethodPost, Header: http.Header{}, Body: body}, nil
}

// mcpView is a held tools/call as its reviewers see it, or nil for
// another call.
func (c *call) mcpView() *approval.MCPCall {
	if c.mcp == nil {
		return nil
	}
	t := c.mcp.tool
	desc, _ := t.Raw["description"].(string)
	return &approval.MCPCall{Tool: t.Name, Digest: t.Digest, Description: desc, Annotations: jsonText(t.Raw["annotations"]),
		Join: c.mcpJoin(), Constrained: c.mcp.constrained}
}

// mcpJoin is the key identical retries of the call share: upstream, tool
// and the arguments' digest (the session is the gate's part of the key).
func (c *call) mcpJoin() string {
	return c.rec.Upstream + "\x00" + c.mcp.tool.Name + "\x00" + c.mcp.args
}

// mcpReady opens the link's upstream session for a tools/call about to be
// sent (a live call's or an approved action's) and sets its headers on
// the outbound request.
func (c *call) mcpReady(ctx context.Context, cred upstream.Credential) error {
	x := &mcpExchange{b: c.b, u: c.u, cred: cred, link: c.b.mcp.link(c.l.Session.ID, c.u), l: c.l}
	x.link.mu.Lock()
	err := x.open(ctx)
	h := x.headers()
	x.link.mu.Unlock()
	if err != nil {
		return err
	}
	for k, v := range h {
		c.out.Header[k] = v
	}
	x.progress, x.token = c.mcp.progress, c.mcp.id
	c.mcp.x = x
	return nil
}

// argsOf is the arguments' digest of a stored tools/call message.
func argsOf(msg *mcp.Message) string {
	_, args, err := msg.ToolCall()
	if err != nil {
		return ""
	}
	sum, _ := mcp.ArgsSHA256(args)
	return sum
}

// mcpResult reads a sent tools/call's answer: the server's result (of type
// complete) or error, scrubbed in every part.
func (c *call) mcpResult(ctx context.Context, resp *response) (*MCPAnswer, error) {
	x := c.mcp.x
	x.cred.Scrub = resp.Scrub
	msg, err := x.answer(ctx, resp.Response, c.mcp.id)
	if err != nil {
		return nil, err
	}
	if msg.Error != nil {
		e := *msg.Error
		e.Message = resp.Scrub.String(e.Message)
		if e.Data != nil {
			e.Data, c.mcp.redact = mcp.ScrubValue(e.Data, resp.Scrub.String)
		}
		if mcp.ReservedCode(e.Code) { // SDKs read these as a closed connection
			e.Code = mcp.CodeInternal
		}
		c.mcp.isErr = true
		return &MCPAnswer{Error: &e}, nil
	}
	result := msg.Result
	if result == nil {
		return nil, fmt.Errorf("%w: the result is not an object", ErrMCPUpstream)
	}
	if _, err := mcp.ResultType(result); err != nil {
		if mcp.IsInputRequired(err) {
			c.b.mcpBlocked(x, "input_required")
			return nil, ErrServerRequestBlocked
		}
		return nil, fmt.Errorf("%w: %v", ErrMCPUpstream, err)
	}
	scrubbed, n := mcp.ScrubOwned(result, resp.Scrub.String) // the answer was just parsed: nothing else holds it
	c.mcp.redact, c.mcp.isErr = n, mcp.IsError(scrubbed)
	return &MCPAnswer{Result: scrubbed}, nil
}

// answerMCP gives the writer a sent tools/call's answer and records its
// completion.
func (p *pipe) answerMCP(resp *response) {
	c, b := p.c, p.b
	defer resp.Close()
	ans, upDur := p.mcpAnswer(resp)
	if ans == nil {
		return
	}
	c.answer = Answer{Status: http.StatusOK, MCP: ans, resp: resp, requestID: c.rec.RequestID}
	w := p.give(Outcome{RequestID: c.rec.RequestID, Answer: &c.answer})
	code := ""
	if w.Err != nil {
		code = "client_gone"
	}
	c.complete(http.StatusOK, w.Bytes, code)
	b.calls.observe(c.rec.Upstream, "allow", "", c.elapsed()-upDur)
	b.mcpCount(c, "allow")
}

// mcpAnswer reads a sent tools/call's answer (mcpResult) and counts the
// upstream's time; a failure is given to the writer and recorded (nil).
func (p *pipe) mcpAnswer(resp *response) (*MCPAnswer, time.Duration) {
	ans, err := p.c.mcpResult(p.ctx, resp)
	upDur := resp.UpstreamTime()
	p.b.calls.upstream(p.ctx, p.c.rec.Upstream, resp.StatusCode, upDur)
	if err != nil {
		p.failSent(err, "error", false, fault.Of(err).Status())
		return nil, upDur
	}
	return ans, upDur
}

// mcpRecord fills an MCP call's part of its audit record: the tool, and
// for an allowed call the constrained values and the arguments' digest.
func (c *call) mcpRecord(ev *audit.Event) {
	if c.mcp == nil {
		return
	}
	m := &audit.MCP{Tool: clip(c.mcp.tool.Name, 128)}
	switch ev.Type {
	case audit.TypeCallAllowed:
		ev.Type = audit.TypeMCPCallAllowed
		m.ArgsSHA256, m.Digest, m.Constrained = c.mcp.args, c.mcp.tool.Digest, c.mcp.constrained
	case audit.TypeCallDenied:
		ev.Type = audit.TypeMCPCallDenied
	case audit.TypeCallCompleted:
		ev.Type = audit.TypeMCPCallCompleted
		m.IsError, m.Redactions = c.mcp.isErr, c.mcp.redact
	}
	ev.MCP = m
}

// constrainedText is each constrained value as its JCS text.
func constrainedText(vals map[string]any) map[string]string {
	if len(vals) == 0 {
		return nil
	}
	out := make(map[string]string, len(vals))
	for k, v := range vals {
		if b, err := mcp.Canonical(v); err == nil {
			out[k] = string(b)
		}
	}
	return out
}

// mcpBlocked audits a request the server made of the client, refused.
func (b *Broker) mcpBlocked(x *mcpExchange, method string) {
	ev := audit.Event{Type: audit.TypeMCPServerRequestBlocked, Actor: audit.Actor{Kind: "system"}, Upstream: x.u.Name,
		Code: fault.ServerRequestBlocked.Code(), MCP: &audit.MCP{Request: x.serverText(method)}}
	if x.l != nil {
		ev.SessionID, ev.TaskID = x.l.Session.ID, x.l.Session.TaskID
	}
	b.audit.AppendAsync(ev)
}

// mcpExecuted is an executed tools/call's stored result: the answer as the
// sandbox gets it (a JSON object holding "result" or "error").
func mcpStored(ans *MCPAnswer) []byte {
	var v any = map[string]any{"result": ans.Result}
	if ans.Error != nil {
		v = map[string]any{"error": ans.Error}
	}
	b, _ := json.Marshal(v)
	return b
}

// MCPStoredAnswer reads an executed tools/call's stored result (see
// mcpStored) back.
func MCPStoredAnswer(body []byte) (*MCPAnswer, error) {
	var v struct {
		Result map[string]any `json:"result"`
		Error  *mcp.WireError `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Result == nil && v.Error == nil {
		return nil, fmt.Errorf("%w: the action's stored result is not an MCP answer", ErrMCPUpstream)
	}
	return &MCPAnswer{Result: v.Result, Error: v.Error}, nil
}

func toAny(tools []map[string]any) []any {
	out := make([]any, len(tools))
	for i, t := range tools {
		out[i] = t
	}
	return out
}

func clipAll(names []string) []string {
	out := slices.Clone(names)
	for i := range out {
		out[i] = clip(out[i], 128)
	}
	return out
}

// mcpJoined finds the action an identical retry of a gated tools/call
// joins (see gate.Service.Joined): its reservation is given back (the
// action holds its own), and nothing is held or sent again.
func (c *call) mcpJoined(ctx context.Context) (approval.Action, bool) {
	if c.mcp == nil || c.step != stepAuthorized {
		return approval.Action{}, false
	}
	a, ok := c.b.appr.Joined(ctx, c.l.Session.ID, c.mcpJoin())
	if !ok {
		return a, false
	}
	c.unreserve()
	c.step = stepSent
	return a, true
}

// runMCPAction sends an approved tools/call (runAction's steps, cleared):
// the tool is listed afresh first, and one that changed since the call was
// held fails unsent (tool_changed); the result is stored as the sandbox
// gets it (mcpStored).
func (b *Broker) runMCPAction(p *pipe, a approval.Action) (*approval.Result, bool, error) {
	c := p.c
	var err error
	p.write = func(o *Outcome) Written { err = o.Err; return Written{} }
	// The stored request is the message sent: its id is the answer's.
	c.mcp = &callMCP{method: mcpToolsCall, tool: mcp.Tool{Name: a.MCP.Tool, Digest: a.MCP.Digest}, constrained: a.MCP.Constrained}
	c.rec.Method = mcpToolsCall
	if msg, perr := mcp.Parse(c.out.Body); perr == nil {
		c.mcp.id, c.mcp.args = msg.ID, argsOf(msg)
	}
	x, xerr := p.exchange()
	if xerr == nil {
		xerr = b.listTools(p.ctx, c.l, x)
	}
	if xerr == nil {
		x.link.mu.Lock()
		t, ok := x.link.cat.tool(a.MCP.Tool)
		_, changed := x.link.cat.changed[a.MCP.Tool]
		x.link.mu.Unlock()
		if changed || !ok || t.Digest != a.MCP.Digest {
			xerr = ErrToolChanged
		}
	}
	if xerr != nil {
		c.unreserve()
		p.refuse(xerr)
		return nil, true, err
	}
	resp := p.send()
	if resp == nil {
		return nil, true, err
	}
	defer resp.Close()
	ans, upDur := p.mcpAnswer(resp)
	if ans == nil {
		return nil, true, err
	}
	body := mcpStored(ans)
	res := &approval.Result{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
	c.complete(http.StatusOK, int64(len(body)), "")
	b.calls.observe(c.rec.Upstream, "allow", "", c.elapsed()-upDur)
	b.mcpCount(c, "allow")
	return res, true, nil
}

// mcpCount counts a tools/call by upstream, tool and outcome. The tool
// label is a name from the upstream's config (its pinned tools), else
// "other": no label value a sandbox or a server chose.
func (b *Broker) mcpCount(c *call, outcome string) {
	if c.mcp == nil || c.mcp.method != mcpToolsCall || c.u == nil {
		return
	}
	tool := "other"
	if _, ok := c.u.Tools[c.mcp.tool.Name]; ok {
		tool = c.mcp.tool.Name
	}
	b.calls.mcpCalls.WithLabelValues(b.calls.label(c.rec.Upstream), tool, outcome).Inc()
}
