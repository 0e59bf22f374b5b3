package web

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/airlock-broker/airlock/internal/approval"
)

// MCPArgument is one argument of a held MCP tool call.
type MCPArgument struct {
	Name string
	// Value is the argument as it will be sent (compact JSON).
	Value json.RawMessage
	// Pinned: the grant fixed it (a pin on args.<name> or below it);
	// otherwise the model chose it.
	Pinned bool
	// Filled: a pin the broker filled in (the model left it out).
	Filled bool
}

// Text is the value as the page shows it.
func (m MCPArgument) Text() string { return string(m.Value) }

// MCPClaim is one of the server's annotations: its claim, never a rule.
type MCPClaim struct {
	Name  string
	Value string // compact JSON
}

// MCPView is a held MCP tool call as its reviewers see it (DESIGN §10):
// the tool, its digest, the arguments of the exact message that will be
// sent with each marked pinned by the grant or chosen by the model, and
// what the server claims of the tool (its description and annotations),
// which the server wrote and which never change the gate.
type MCPView struct {
	Tool      string
	Digest    string
	Arguments []MCPArgument // by name
	// Description is the server's description of the tool: untrusted
	// text, shown only as text.
	Description string
	// Annotations is the server's annotations object, nil when it gave
	// none (or not an object); Claims lists it by name for the page.
	Annotations json.RawMessage
	Claims      []MCPClaim
}

// PinnedNames are the arguments the grant fixed; ModelNames the others.
func (v *MCPView) PinnedNames() []string { return v.names(true) }

// ModelNames are the arguments the model chose.
func (v *MCPView) ModelNames() []string { return v.names(false) }

func (v *MCPView) names(pinned bool) []string {
	out := []string{}
	for _, a := range v.Arguments {
		if a.Pinned == pinned {
			out = append(out, a.Name)
		}
	}
	return out
}

// MCPOf is the MCP view of a, nil when a is not a held MCP tool call. The
// arguments are read from the held JSON-RPC message itself
// (params.arguments of a.Request.Body), so the page shows what will be
// sent, not a copy of it.
func MCPOf(a approval.Action) *MCPView {
	if a.MCP == nil {
		return nil
	}
	v := &MCPView{Tool: a.MCP.Tool, Digest: a.MCP.Digest, Description: a.MCP.Description}
	var msg struct {
		Params struct {
			Arguments map[string]json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	_ = json.Unmarshal(a.Request.Body, &msg)
	for name, raw := range msg.Params.Arguments {
		v.Arguments = append(v.Arguments, MCPArgument{Name: name, Value: compact(raw),
			Pinned: underArg(a.Pinned, name), Filled: underArg(a.Filled, name)})
	}
	sort.Slice(v.Arguments, func(i, j int) bool { return v.Arguments[i].Name < v.Arguments[j].Name })
	var ann map[string]json.RawMessage
	if a.MCP.Annotations != "" && json.Unmarshal([]byte(a.MCP.Annotations), &ann) == nil && ann != nil {
		v.Annotations = compact(json.RawMessage(a.MCP.Annotations))
		for k, raw := range ann {
			v.Claims = append(v.Claims, MCPClaim{Name: k, Value: string(compact(raw))})
		}
		sort.Slice(v.Claims, func(i, j int) bool { return v.Claims[i].Name < v.Claims[j].Name })
	}
	return v
}

// underArg reports whether keys name argument name: args.<name> itself or
// a key below it (args.<name>.x, args.<name>.*).
func underArg(keys []string, name string) bool {
	k := "args." + name
	for _, p := range keys {
		if p == k || strings.HasPrefix(p, k+".") {
			return true
		}
	}
	return false
}

func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
