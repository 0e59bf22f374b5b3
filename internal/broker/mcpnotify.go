package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/mcp"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// What of the server's notifications reaches the sandbox (DESIGN §10):
// a tools/call's progress, while the call runs, when the client asked
// for it; and notifications/tools/list_changed, on the session era's GET
// stream. Nothing else: a server's other notifications (logging, resource
// updates) are dropped, and each relayed one is rebuilt by the broker from
// the few fields it carries, its text scrubbed.
//
// The broker asks the server for a call's progress under a token of its
// own (the call's upstream id, never the sandbox's); a progress
// notification for another token is dropped. The list changes the GET
// stream relays come from the server (its notification, on any of the
// link's streams) and from the broker itself (a tool quarantined changes
// what tools/list shows). While some sandbox listens, the link keeps a GET
// stream of its own open to the server, when the server offers one.

// MCPListen is the method of the session era's GET stream (the door's
// own name: no JSON-RPC message has it).
const MCPListen = "GET"

// Progress is a call's progress as the server told it, for the sandbox's
// client: Total 0 is unknown; Message is scrubbed.
type Progress struct {
	Progress, Total float64
	Message         string
}

// mcpWatchRetry bounds how soon a broken GET stream to the server is
// opened again while a sandbox listens.
const (
	mcpWatchRetry    = time.Second
	mcpWatchRetryMax = 30 * time.Second
)

// listeners are a link's sandbox GET streams, and its own GET stream to
// the server while any listens.
type listeners struct {
	mu    sync.Mutex
	subs  map[chan struct{}]struct{}
	watch context.CancelFunc // the link's GET stream to the server, while subs is not empty
}

// changed tells every listener the tool list changed (at most one
// pending change each: a listener that has not yet read one needs no
// second).
func (ls *listeners) changed() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for ch := range ls.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribe adds a listener; the first starts watch (the server's GET
// stream) with a context that ends when the last listener leaves.
func (ls *listeners) subscribe(watch func(context.Context)) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	ls.mu.Lock()
	if ls.subs == nil {
		ls.subs = map[chan struct{}]struct{}{}
	}
	ls.subs[ch] = struct{}{}
	if ls.watch == nil {
		ctx, cancel := context.WithCancel(context.Background())
		ls.watch = cancel
		go watch(ctx)
	}
	ls.mu.Unlock()
	return ch, func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		delete(ls.subs, ch)
		if len(ls.subs) == 0 && ls.watch != nil {
			ls.watch()
			ls.watch = nil
		}
	}
}

// stop ends the link's GET stream to the server (the session ended).
func (ls *listeners) stop() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.watch != nil {
		ls.watch()
		ls.watch = nil
	}
}

// mcpListen serves the session era's GET stream: the writer gets an
// answer whose Changes tells each change of the tools the session may
// list, until Done (a kill, the session's end, the kill-switch) or the
// client leaves. A session without a tool rule on the upstream is refused
// (no_matching_grant), as its tools/list is; each stream holds one of the
// session's stream slots (max_streams_per_session: rate_limited past it).
func (p *pipe) mcpListen() {
	c := p.c
	if len(c.b.toolRules(c.l, c.u.Name)) == 0 {
		p.refuse(grants.ErrNoMatchingGrant)
		return
	}
	release, err := c.stream() // a stream slot of the session's (max_streams_per_session)
	if err != nil {
		p.refuse(err)
		return
	}
	defer release()
	x, err := p.exchange()
	if err != nil {
		p.refuse(err)
		return
	}
	bound, stop := c.b.BoundTo(p.ctx, c.l, nil)
	defer stop()
	changes, leave := x.link.listen.subscribe(func(ctx context.Context) { c.b.watchMCP(ctx, x) })
	defer leave()
	p.give(Outcome{RequestID: c.rec.RequestID, Answer: &Answer{Status: http.StatusOK,
		MCP: &MCPAnswer{Changes: changes, Done: bound.Done()}, requestID: c.rec.RequestID}})
}

// watchMCP keeps the link's GET stream to the server open until ctx ends,
// reading its messages (match: a list change is told the listeners, a
// ping answered, any other request of the server's refused, audited, and
// the stream ended). A server that offers no GET stream (405, or a 200
// that is no event stream) is not asked again; a broken stream, or
// another error status, is asked again after a pause that doubles up to
// mcpWatchRetryMax (back to mcpWatchRetry after a stream that stood that
// long). The credential is fetched anew for each stream (a minted one may
// have expired meanwhile).
func (b *Broker) watchMCP(ctx context.Context, x *mcpExchange) {
	pause := mcpWatchRetry
	for ctx.Err() == nil {
		began := time.Now()
		offered, err := b.watchOnce(ctx, x)
		if !offered || ctx.Err() != nil {
			return
		}
		if err != nil {
			b.log.Debug("mcp GET stream to the server ended", "upstream", x.u.Name, "cause", x.serverText(err.Error()))
		}
		if time.Since(began) > mcpWatchRetryMax {
			pause = mcpWatchRetry // it had stood a while: not a server that breaks it at once
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, mcpWatchRetryMax)
	}
}

// watchOnce opens one GET stream to the server and reads it until it
// ends: offered is false when the server offers none.
func (b *Broker) watchOnce(ctx context.Context, x *mcpExchange) (offered bool, err error) {
	cred, err := b.creds.Credential(ctx, x.l, x.u)
	if err != nil {
		return true, err
	}
	x = &mcpExchange{b: x.b, l: x.l, u: x.u, cred: cred, link: x.link}
	// Initializing holds the link's lock, which every call on the link
	// takes: bounded by the upstream's timeout, as a call's own is.
	openCtx, cancel := context.WithTimeout(ctx, x.u.Timeout)
	x.link.mu.Lock()
	err = x.open(openCtx)
	h := x.headers()
	x.link.mu.Unlock()
	cancel()
	if err != nil {
		return true, err
	}
	if h.Get(mcp.HeaderSessionID) == "" {
		return false, nil // a server without sessions has no stream to offer
	}
	h.Del("Content-Type")
	h.Set("Accept", "text/event-stream")
	resp, err := x.u.Do(ctx, &upstream.Outbound{Method: http.MethodGet, Header: h}, x.cred)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		x.expired(h)
		return true, errors.New("the server no longer knows the session")
	}
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed, resp.StatusCode == http.StatusOK && !isEventStream(resp.Header.Get("Content-Type")):
		return false, nil // no GET stream offered
	case resp.StatusCode != http.StatusOK:
		return true, fmt.Errorf("the server answered the GET stream %d", resp.StatusCode) // asked again later
	}
	sse := mcp.NewSSEReader(resp.Body, int(x.u.MaxBody))
	for {
		ev, err := sse.Next()
		if err != nil {
			return true, err
		}
		if len(ev.Data) == 0 {
			continue
		}
		// The GET stream carries no answer: the zero id matches none. A
		// request of the server's (refused and audited by match) ends the
		// stream: a server that asks again and again is asked back only
		// after a pause, so it cannot flood the audit chain.
		if _, err := x.match(ctx, ev.Data, mcp.ID{}); err != nil && !errors.Is(err, errNotTheAnswer) {
			return true, err
		}
	}
}

// notified takes a notification of the server's (see match): a list
// change is told the link's listeners; a progress for the exchange's call
// is told its client; every other is dropped.
func (x *mcpExchange) notified(msg *mcp.Message) {
	switch msg.Method {
	case "notifications/tools/list_changed":
		x.link.listen.changed()
	case "notifications/progress":
		if x.progress == nil || !sameToken(msg.Params["progressToken"], x.token) {
			return
		}
		done, ok := number(msg.Params["progress"])
		if !ok {
			return
		}
		var total float64 // unknown, unless a finite number
		if t, ok := number(msg.Params["total"]); ok {
			total = t
		}
		text, _ := msg.Params["message"].(string)
		x.progress(Progress{Progress: done, Total: total, Message: x.serverText(text)})
	}
}

// sameToken reports whether a progress notification's token is the one
// the broker gave the call (its upstream id).
func sameToken(v any, id mcp.ID) bool {
	if id.IsZero() {
		return false
	}
	switch t := v.(type) {
	case json.Number:
		return t.String() == id.String()
	case string:
		return strconv.Quote(t) == id.String()
	}
	return false
}

// number is a JSON number as a float64.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil && !math.IsInf(f, 0)
	case float64:
		return n, !math.IsInf(n, 0) && !math.IsNaN(n)
	}
	return 0, false
}

// isEventStream reports whether a Content-Type is an SSE stream's.
func isEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}
