package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/mcp"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The broker's client side of an MCP upstream (DESIGN §10). The broker
// speaks to the server itself, over its own session for each Airlock
// session (a link): it initializes the session with no client capability
// (no sampling, elicitation or roots), sends the messages it checked, and
// reads the answers, JSON or an SSE stream, refusing every request the
// server makes of the client. The upstream's session id never leaves the
// link. Every exchange goes through upstream.Upstream.Do, with the
// credential injected there.

// Errors of an MCP upstream exchange.
var (
	// ErrServerRequestBlocked: the server asked the client for something
	// (sampling, elicitation, roots, input_required): answered upstream
	// with an error, never relayed to the sandbox.
	ErrServerRequestBlocked = fault.New(fault.ServerRequestBlocked, "the MCP server asked the client for input (sampling, elicitation or roots), which the broker never relays")
	// ErrMCPUpstream: the server's answer is not an MCP answer the broker
	// can check (an unknown resultType, no answer to the request, a
	// malformed message).
	ErrMCPUpstream = fault.Hidden(fault.UpstreamError, "the MCP server's answer could not be read")
)

// mcpKey names a link: one Airlock session's on one upstream.
type mcpKey struct{ session, upstream string }

// mcpLink is one Airlock session's MCP session on one upstream: the
// upstream's session id and version, and the tools as the session saw them
// (see mcptools.go).
type mcpLink struct {
	mu      sync.Mutex // held while (re)initializing and while the catalogue changes
	ready   bool
	session string // the upstream's Mcp-Session-Id ("" if it gave none)
	version string // the protocol version the upstream agreed

	cat catalogue
	// listen are the sandbox's GET streams on the link (mcpnotify.go).
	listen listeners
}

// mcpLinks holds the links of this replica.
type mcpLinks struct {
	mu    sync.Mutex
	links map[mcpKey]*mcpLink
	seq   atomic.Uint64 // the broker's own JSON-RPC ids upstream
	// holds serialize holding gated calls by their join key (striped), so
	// that identical calls arriving together join one action.
	holds [64]sync.Mutex
}

// holdLock is the lock of join key k.
func (m *mcpLinks) holdLock(k string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(k))
	return &m.holds[h.Sum32()%uint32(len(m.holds))]
}

// link returns the link of session on upstream u, made on first use.
func (m *mcpLinks) link(session string, u *upstream.Upstream) *mcpLink {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.links == nil {
		m.links = map[mcpKey]*mcpLink{}
	}
	k := mcpKey{session, u.Name}
	l, ok := m.links[k]
	if !ok {
		l = &mcpLink{cat: newCatalogue(u.Tools)}
		m.links[k] = l
	}
	return l
}

// drop forgets the links of a session that ended.
func (m *mcpLinks) drop(session string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.links {
		if k.session == session {
			m.links[k].listen.stop()
			delete(m.links, k)
		}
	}
}

// nextID is a fresh JSON-RPC id for a message the broker sends upstream.
func (m *mcpLinks) nextID() mcp.ID { return mcp.IntID(int64(m.seq.Add(1))) }

// mcpExchange is what an exchange with an MCP upstream needs.
type mcpExchange struct {
	b    *Broker
	l    *sessions.LiveSession // the session the link is of (for its records)
	u    *upstream.Upstream
	cred upstream.Credential
	link *mcpLink
	// progress, for a tools/call whose client asked for its progress, is
	// told the server's progress notifications for token (mcpnotify.go).
	progress func(Progress)
	token    mcp.ID
}

// headers are the headers of a message to the upstream on the link.
func (x *mcpExchange) headers() http.Header {
	h := http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"application/json, text/event-stream"},
	}
	if x.link.session != "" {
		h[mcp.HeaderSessionID] = []string{x.link.session}
	}
	if x.link.version != "" {
		h[mcp.HeaderProtocolVersion] = []string{x.link.version}
	}
	return h
}

// open initializes the link's upstream session if it is not yet: an
// initialize request declaring no client capability, then
// notifications/initialized. The caller holds x.link.mu.
func (x *mcpExchange) open(ctx context.Context) error {
	if x.link.ready {
		return nil
	}
	x.link.session, x.link.version = "", ""
	params := map[string]any{
		"protocolVersion": mcp.V20251125,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "airlock", "version": "1"},
	}
	id := x.b.mcp.nextID()
	body, err := mcp.EncodeRequest(id, "initialize", params, nil)
	if err != nil {
		return err
	}
	resp, err := x.u.Do(ctx, &upstream.Outbound{Method: http.MethodPost, Header: x.headers(), Body: body}, x.cred)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	result, err := x.read(ctx, resp, id)
	if err != nil {
		return err
	}
	v, _ := result["protocolVersion"].(string)
	if !mcp.IsSupported(v) || mcp.Stateless(v) {
		return fmt.Errorf("%w: the server answered protocol version %q", ErrMCPUpstream, printableClip(v))
	}
	x.link.version = v
	x.link.session = resp.Header.Get(mcp.HeaderSessionID)
	note, err := mcp.EncodeNotification("notifications/initialized", nil)
	if err != nil {
		return err
	}
	nresp, err := x.u.Do(ctx, &upstream.Outbound{Method: http.MethodPost, Header: x.headers(), Body: note}, x.cred)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(nresp.Body, 64<<10))
	nresp.Body.Close()
	x.link.ready = true
	return nil
}

// call sends one request on the link (opened first) and reads its result.
// The caller holds x.link.mu for open's sake only: call releases it
// before the round trip.
func (x *mcpExchange) call(ctx context.Context, method string, params map[string]any) (map[string]any, error) {
	x.link.mu.Lock()
	if err := x.open(ctx); err != nil {
		x.link.mu.Unlock()
		return nil, err
	}
	h := x.headers()
	x.link.mu.Unlock()
	id := x.b.mcp.nextID()
	body, err := mcp.EncodeRequest(id, method, params, nil)
	if err != nil {
		return nil, err
	}
	resp, err := x.u.Do(ctx, &upstream.Outbound{Method: http.MethodPost, Header: h, Body: body}, x.cred)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && h.Get(mcp.HeaderSessionID) != "" {
		x.expired(h)
	}
	return x.read(ctx, resp, id)
}

// expired forgets the upstream's session the server no longer knows (a
// 404 on it): the next exchange initializes a new one.
func (x *mcpExchange) expired(sent http.Header) {
	x.link.mu.Lock()
	defer x.link.mu.Unlock()
	if x.link.session == sent.Get(mcp.HeaderSessionID) {
		x.link.ready = false
	}
}

// read reads the answer to request id from resp: a JSON message, or an
// SSE stream whose messages are read until the answer (notifications are
// dropped; a request of the server's is answered with an error and fails
// the exchange with ErrServerRequestBlocked). A JSON-RPC error answer is
// an *mcpError; a result of a type other than complete is refused.
func (x *mcpExchange) read(ctx context.Context, resp *http.Response, id mcp.ID) (map[string]any, error) {
	msg, err := x.answer(ctx, resp, id)
	if err != nil {
		return nil, err
	}
	if msg.Error != nil {
		return nil, &mcpError{wire: msg.Error}
	}
	result := msg.Result
	if result == nil {
		return nil, fmt.Errorf("%w: the result is not an object", ErrMCPUpstream)
	}
	if _, err := mcp.ResultType(result); err != nil {
		if errors.Is(err, mcp.ErrInputRequired) {
			return nil, ErrServerRequestBlocked
		}
		return nil, fmt.Errorf("%w: %v", ErrMCPUpstream, err)
	}
	return result, nil
}

// answer finds the response to id in resp.
func (x *mcpExchange) answer(ctx context.Context, resp *http.Response, id mcp.ID) (*mcp.Message, error) {
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: HTTP status %d", ErrMCPUpstream, resp.StatusCode)
	}
	limit := x.u.MaxBody
	if !isEventStream(resp.Header.Get("Content-Type")) {
		data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return nil, upstream.ReadFailed(err)
		}
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("%w: the answer exceeds max_body", ErrMCPUpstream)
		}
		msg, err := x.match(ctx, data, id)
		if errors.Is(err, errNotTheAnswer) {
			return nil, fmt.Errorf("%w: the answer is not the request's", ErrMCPUpstream)
		}
		return msg, err
	}
	// The whole stream is bounded, comments and notifications included: a
	// server that streams forever is cut at max_body.
	sse := mcp.NewSSEReader(&boundedBody{r: resp.Body, left: limit}, int(limit))
	var blocked error
	for {
		ev, err := sse.Next()
		if err != nil {
			if blocked != nil {
				return nil, blocked
			}
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: the stream ended without an answer", ErrMCPUpstream)
			}
			if errors.Is(err, errStreamTooLong) {
				return nil, fmt.Errorf("%w: the answer's stream exceeds max_body", ErrMCPUpstream)
			}
			return nil, upstream.ReadFailed(err)
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			continue
		}
		msg, err := x.match(ctx, ev.Data, id)
		switch {
		case errors.Is(err, errNotTheAnswer):
			continue
		case errors.Is(err, ErrServerRequestBlocked):
			blocked = err // the answer may still come: the server's request was refused
			continue
		}
		if blocked != nil && err == nil {
			return nil, blocked // whatever the server answered after being refused input
		}
		return msg, err
	}
}

// errNotTheAnswer is a message of the stream other than the answer (a
// notification): read past.
var errNotTheAnswer = errors.New("not the answer")

// match reads one message of the upstream's: the response to id, a
// notification (errNotTheAnswer), or a request of the server's, refused
// upstream at once (ErrServerRequestBlocked).
func (x *mcpExchange) match(ctx context.Context, data []byte, id mcp.ID) (*mcp.Message, error) {
	msg, err := mcp.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMCPUpstream, err)
	}
	switch {
	case msg.IsResponse():
		if msg.ID != id {
			return nil, errNotTheAnswer
		}
		return msg, nil
	case msg.IsRequest() && msg.Method == mcp.MethodPing:
		x.reply(ctx, msg.ID, nil) // a liveness check, answered: no input of the client's
		return nil, errNotTheAnswer
	case msg.IsRequest():
		x.refuseRequest(ctx, msg)
		x.b.mcpBlocked(x, msg.Method)
		return nil, ErrServerRequestBlocked
	case msg.IsNotification():
		x.notified(msg)
	}
	return nil, errNotTheAnswer
}

// refuseRequest answers a request the server made of the client with an
// error (the broker declared no capability that would allow it).
func (x *mcpExchange) refuseRequest(ctx context.Context, msg *mcp.Message) {
	x.reply(ctx, msg.ID, &mcp.WireError{Code: mcp.CodeMethodNotFound, Message: "the client does not serve this request"})
}

// reply answers a request of the server's: an empty result, or werr.
func (x *mcpExchange) reply(ctx context.Context, id mcp.ID, werr *mcp.WireError) {
	var (
		body []byte
		err  error
	)
	if werr != nil {
		body, err = mcp.EncodeError(id, werr.Code, werr.Message, nil)
	} else {
		body, err = mcp.EncodeResult(id, map[string]any{})
	}
	if err != nil {
		return
	}
	x.link.mu.Lock()
	h := x.headers()
	x.link.mu.Unlock()
	resp, err := x.u.Do(ctx, &upstream.Outbound{Method: http.MethodPost, Header: h, Body: body}, x.cred)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
}

// mcpError is a JSON-RPC error the upstream answered.
type mcpError struct{ wire *mcp.WireError }

func (e *mcpError) Error() string {
	return "the MCP server answered error " + strconv.Itoa(e.wire.Code)
}

// serverText is text the server chose (a tool's name, a method), made fit
// for a record or a log line: scrubbed of every secret the broker holds
// (a hostile server may name a tool after its credential), escaped and cut.
func (x *mcpExchange) serverText(s string) string {
	if x.cred.Scrub != nil {
		s = x.cred.Scrub.String(s)
	} else if sc := x.b.creds.Secrets(); sc != nil {
		s = sc.Scrubber().String(s)
	}
	return clip(s, 128)
}

// printableClip bounds and escapes text an upstream chose, for an error.
func printableClip(s string) string { return clip(s, 64) }

// jsonText is v as JSON text (for an audit record's annotations).
func jsonText(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// errStreamTooLong: an answer's stream went past its bound.
var errStreamTooLong = errors.New("the stream exceeds its bound")

// boundedBody reads at most left bytes of r, then fails errStreamTooLong.
type boundedBody struct {
	r    io.Reader
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errStreamTooLong
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
