package broker

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/mcp"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// Tool pinning (DESIGN §10): a tool's digest is recorded the first time
// the Airlock session sees it (or fixed in config); a tool that differs
// later is quarantined for the session: its calls are refused
// tool_changed, its held actions fail unsent, and the change is audited
// with both digests.

// ErrToolChanged: the tool differs from the one first seen (or fixed in
// config): quarantined.
var ErrToolChanged = fault.New(fault.ToolChanged, "the MCP tool changed since it was first seen (its name, description, input schema or annotations): quarantined for this session")

// ErrUnknownTool: the server lists no tool of the called name.
var ErrUnknownTool = fault.New(fault.NotFound, "the MCP server lists no tool of this name")

// Bounds of a listing: pages read of the server, and tools kept.
const (
	maxListPages = 50
	maxTools     = 2000
	listPageSize = 100 // the broker's own pages to the sandbox
)

// catalogue is what a session saw of an upstream's tools.
type catalogue struct {
	fixed    map[string]string // digests fixed in config
	recorded map[string]string // tool → digest first seen
	changed  map[string]string // quarantined tool → the digest it changed to
	shared   map[string]bool   // tools whose recorded digest is the store's (shareDigests)
	snapshot bool              // the session's first listing was compared with the store's
	tools    []mcp.Tool        // as last listed, in the server's order
	listed   bool
}

func newCatalogue(fixed map[string]string) catalogue {
	return catalogue{fixed: fixed, recorded: map[string]string{}, changed: map[string]string{}, shared: map[string]bool{}}
}

// toolChange is a tool seen to differ from its recorded digest.
type toolChange struct{ tool, recorded, now string }

// see takes a fresh listing and returns the tools that changed (newly).
func (c *catalogue) see(tools []mcp.Tool) []toolChange {
	var changes []toolChange
	for _, t := range tools {
		want, fixed := c.fixed[t.Name]
		if !fixed {
			var seen bool
			if want, seen = c.recorded[t.Name]; !seen {
				c.recorded[t.Name] = t.Digest
				continue
			}
		}
		if t.Digest != want {
			if _, already := c.changed[t.Name]; !already {
				changes = append(changes, toolChange{tool: t.Name, recorded: want, now: t.Digest})
			}
			c.changed[t.Name] = t.Digest
		}
	}
	c.tools, c.listed = tools, true
	return changes
}

// tool is the named tool as last listed, or false.
func (c *catalogue) tool(name string) (mcp.Tool, bool) {
	for _, t := range c.tools {
		if t.Name == name {
			return t, true
		}
	}
	return mcp.Tool{}, false
}

// list reads every page of the upstream's tools/list (bounded), records
// what the session sees, and acts on the tools that changed.
func (b *Broker) listTools(ctx context.Context, l *sessions.LiveSession, x *mcpExchange) error {
	var all []mcp.Tool
	cursor := ""
	for page := 0; page < maxListPages; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		result, err := x.call(ctx, "tools/list", params)
		if err != nil {
			return err
		}
		tools, next, err := mcp.ParseToolsList(result)
		if err != nil {
			return err
		}
		all = append(all, tools...)
		if len(all) > maxTools {
			return fmt.Errorf("%w: the server lists more than %d tools", ErrMCPUpstream, maxTools)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if err := b.shareDigests(ctx, l, x, all); err != nil {
		return err
	}
	x.link.mu.Lock()
	changes := x.link.cat.see(all)
	x.link.mu.Unlock()
	for _, ch := range changes {
		b.toolChanged(ctx, l, x, ch)
	}
	return nil
}

// errToolDigests: the store could not say which digest the session first
// saw of a tool: the listing fails closed.
var errToolDigests = fault.Hidden(fault.BrokerUnavailable, "the MCP tools' first-seen digests could not be read or recorded")

// shareDigests makes the digests a link compares with the first ones
// any replica saw for the session (meta CreateMeta): the first listing of
// the session's on the upstream is kept whole (every tool, shown or not),
// and every replica's first listing compares with it; a tool the server
// adds later, once a rule names it, is kept by itself, with the digest
// this replica saw first. Tools no rule names that the first listing did
// not have are recorded by the link alone (never shown nor called).
func (b *Broker) shareDigests(ctx context.Context, l *sessions.LiveSession, x *mcpExchange, all []mcp.Tool) error {
	x.link.mu.Lock()
	snapshot := x.link.cat.snapshot
	x.link.mu.Unlock()
	if !snapshot {
		first, err := b.firstListing(ctx, l, x, all)
		if err != nil {
			return err
		}
		x.link.mu.Lock()
		for name, digest := range first {
			if _, fixed := x.link.cat.fixed[name]; !fixed {
				x.link.cat.recorded[name], x.link.cat.shared[name] = digest, true
			}
		}
		x.link.cat.snapshot = true
		x.link.mu.Unlock()
	}
	rules := b.toolRules(l, x.u.Name)
	x.link.mu.Lock()
	var todo []mcp.Tool
	for _, t := range all {
		if _, fixed := x.link.cat.fixed[t.Name]; !fixed && !x.link.cat.shared[t.Name] && namesTool(rules, t.Name) {
			if seen, ok := x.link.cat.recorded[t.Name]; ok {
				t.Digest = seen // this replica saw it first so
			}
			todo = append(todo, t)
		}
	}
	x.link.mu.Unlock()
	for _, t := range todo {
		first, err := b.toolDigests.CreateMeta(ctx, toolDigestKey(l.Session.ID, x.u.Name, t.Name), []byte(t.Digest))
		if err != nil {
			b.log.Error("mcp tool digest not recorded", "session_id", l.Session.ID, "upstream", x.u.Name, "cause", err)
			return errToolDigests
		}
		x.link.mu.Lock()
		x.link.cat.recorded[t.Name] = string(first)
		x.link.cat.shared[t.Name] = true
		x.link.mu.Unlock()
	}
	return nil
}

// firstListing is the session's first listing on the upstream as the
// store keeps it (all, when this is the first): tool name → digest.
func (b *Broker) firstListing(ctx context.Context, l *sessions.LiveSession, x *mcpExchange, all []mcp.Tool) (map[string]string, error) {
	mine := make(map[string]string, len(all))
	for _, t := range all {
		if _, dup := mine[t.Name]; !dup {
			mine[t.Name] = t.Digest
		}
	}
	value, err := json.Marshal(mine)
	if err != nil {
		return nil, errToolDigests
	}
	stored, err := b.toolDigests.CreateMeta(ctx, "mcp_tools_first/"+l.Session.ID+"/"+x.u.Name, value)
	if err != nil {
		b.log.Error("mcp first listing not recorded", "session_id", l.Session.ID, "upstream", x.u.Name, "cause", err)
		return nil, errToolDigests
	}
	first := map[string]string{}
	if err := json.Unmarshal(stored, &first); err != nil {
		b.log.Error("mcp first listing unreadable", "session_id", l.Session.ID, "upstream", x.u.Name, "cause", err)
		return nil, errToolDigests
	}
	return first, nil
}

// toolDigestKey is the meta key of a session's first-seen digest of a
// tool added after its first listing.
func toolDigestKey(session, upstream, tool string) string {
	sum := sha256.Sum256([]byte(tool))
	return "mcp_tool_digest/" + session + "/" + upstream + "/" + hex.EncodeToString(sum[:16])
}

// toolChanged audits a changed tool and fails its held actions unsent.
func (b *Broker) toolChanged(ctx context.Context, l *sessions.LiveSession, x *mcpExchange, ch toolChange) {
	name := x.serverText(ch.tool)
	ev := audit.Event{Type: audit.TypeMCPToolChanged, Actor: audit.Actor{Kind: "system"}, SessionID: l.Session.ID, TaskID: l.Session.TaskID,
		Upstream: x.u.Name, Code: fault.ToolChanged.Code(),
		MCP: &audit.MCP{Tool: name, Digest: ch.now, Recorded: ch.recorded}}
	b.audit.AppendAsync(ev)
	x.link.listen.changed() // what tools/list shows changed: the tool is hidden
	b.log.Warn("mcp tool changed: quarantined", "session_id", l.Session.ID, "upstream", x.u.Name, "tool", name,
		"recorded", ch.recorded, "served", ch.now)
	b.appr.FailTool(context.WithoutCancel(ctx), l.Session.ID, x.u.Name, ch.tool, "the tool changed since it was held ("+ch.recorded+" → "+ch.now+")")
}

// toolFor resolves a tools/call's tool on the link: listed first when the
// session has not seen the server's tools yet; refused when quarantined
// or not served.
func (b *Broker) toolFor(ctx context.Context, l *sessions.LiveSession, x *mcpExchange, name string) (mcp.Tool, error) {
	x.link.mu.Lock()
	listed := x.link.cat.listed
	x.link.mu.Unlock()
	if !listed {
		if err := b.listTools(ctx, l, x); err != nil {
			return mcp.Tool{}, err
		}
	}
	x.link.mu.Lock()
	defer x.link.mu.Unlock()
	if _, bad := x.link.cat.changed[name]; bad {
		return mcp.Tool{}, ErrToolChanged
	}
	t, ok := x.link.cat.tool(name)
	if !ok {
		return mcp.Tool{}, ErrUnknownTool
	}
	return t, nil
}

// toolRules are the rules of the session's live grants on upstream that
// name a tool, in grant order.
func (b *Broker) toolRules(l *sessions.LiveSession, upstreamName string) []grants.ToolRule {
	now := b.now()
	var rules []grants.ToolRule
	for _, g := range l.Grants() {
		if g.Grant.Upstream != upstreamName || g.Revoked() || !now.Before(g.Grant.ExpiresAt) {
			continue
		}
		rules = append(rules, g.ToolRules()...)
	}
	return rules
}

// shownTools is the sandbox's view of the catalogue: only the tools some
// rule allows and that are not quarantined, each scrubbed and its input
// schema narrowed by the first rule that names it; and the names hidden.
func (b *Broker) shownTools(x *mcpExchange, rules []grants.ToolRule) (shown []map[string]any, names, hidden []string) {
	x.link.mu.Lock()
	tools, changed := x.link.cat.tools, x.link.cat.changed
	x.link.mu.Unlock()
	for _, t := range tools {
		var rule *grants.ToolRule
		for i := range rules {
			if rules[i].Tool == t.Name {
				rule = &rules[i]
				break
			}
		}
		if _, bad := changed[t.Name]; bad || rule == nil {
			hidden = append(hidden, x.serverText(t.Name))
			continue
		}
		narrowed := mcp.Narrow(t.Raw, narrowings(rule), rule.DenyUnknown)
		scrubbed, _ := mcp.ScrubResult(narrowed, x.cred.Scrub.String)
		shown = append(shown, scrubbed)
		names = append(names, t.Name)
	}
	return shown, names, hidden
}

// narrowings converts a rule's constraints for mcp.Narrow.
func narrowings(r *grants.ToolRule) map[string]mcp.Narrowing {
	out := make(map[string]mcp.Narrowing, len(r.Constraints))
	for key, c := range r.Constraints {
		out[key] = mcp.Narrowing{Pin: c.Pin, HasPin: c.Pin != nil, OneOf: c.OneOf, Min: c.Min, Max: c.Max, MaxLength: c.MaxLength,
			Pattern: c.Pattern, Required: c.Required}
	}
	return out
}

// page cuts the shown tools at the broker's cursor: the page and the next
// cursor ("" at the end). A cursor the broker did not make is refused.
func page(shown []map[string]any, cursor string) ([]map[string]any, string, error) {
	from := 0
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		n, aerr := strconv.Atoi(strings.TrimPrefix(string(raw), "airlock:"))
		if err != nil || aerr != nil || !strings.HasPrefix(string(raw), "airlock:") || n < 0 || n > len(shown) {
			return nil, "", fmt.Errorf("%w: the cursor is not one the broker gave", grants.ErrBadRequest)
		}
		from = n
	}
	to := min(from+listPageSize, len(shown))
	next := ""
	if to < len(shown) {
		next = base64.RawURLEncoding.EncodeToString([]byte("airlock:" + strconv.Itoa(to)))
	}
	return shown[from:to], next, nil
}
