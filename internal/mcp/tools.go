package mcp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-broker/airlock/internal/fault"
)

// ErrToolsList is a tools/list result that is not one: tools not an array
// of objects each with a non-empty string name, a name served twice, a
// nextCursor that is not a string. It is an upstream error.
// Its text, which may quote what the server served, is never shown: the
// sandbox is told the kind's title.
var ErrToolsList = fault.Hidden(fault.UpstreamError, "the MCP server answered a malformed tools/list result")

// Tool is one tool of a tools/list result: its name, the object as served,
// and its pinning digest (ToolDigest of Raw).
type Tool struct {
	Name   string
	Raw    map[string]any
	Digest string
}

// ParseToolsList reads a tools/list result: its tools, in the order
// served, and its nextCursor ("" when there is no next page).
func ParseToolsList(result map[string]any) ([]Tool, string, error) {
	arr, ok := result["tools"].([]any)
	if !ok {
		return nil, "", fmt.Errorf("%w: \"tools\" must be an array", ErrToolsList)
	}
	cursor := ""
	if c, ok := result["nextCursor"]; ok && c != nil {
		if cursor, ok = c.(string); !ok {
			return nil, "", fmt.Errorf("%w: \"nextCursor\" must be a string", ErrToolsList)
		}
	}
	tools := make([]Tool, 0, len(arr))
	seen := make(map[string]bool, len(arr))
	for i, x := range arr {
		raw, ok := x.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("%w: tools[%d] is not an object", ErrToolsList, i)
		}
		name, ok := raw["name"].(string)
		if !ok || name == "" {
			return nil, "", fmt.Errorf("%w: tools[%d] has no name", ErrToolsList, i)
		}
		if seen[name] {
			return nil, "", fmt.Errorf("%w: tool %q is served twice", ErrToolsList, truncate(name, 64))
		}
		seen[name] = true
		digest, err := ToolDigest(raw)
		if err != nil {
			return nil, "", fmt.Errorf("%w: tool %q: %w", ErrToolsList, truncate(name, 64), err)
		}
		tools = append(tools, Tool{Name: name, Raw: raw, Digest: digest})
	}
	return tools, cursor, nil
}

// Narrowing is what a grant's constraint on one argument shows the model
// in the tool's input schema (the caller converts it from
// grants.Constraint): a pin (HasPin, since a pin may be null) becomes
// "const" and is no longer required (the broker fills it in); OneOf an
// "enum"; Min and Max "minimum" and "maximum"; MaxLength "maxLength" for a
// string and "maxItems" for an array; Pattern "pattern"; Required adds
// the argument to "required".
type Narrowing struct {
	Pin       any
	HasPin    bool
	OneOf     []any
	Min, Max  *float64
	MaxLength *int
	Pattern   string
	Required  bool
}

// Narrow is a deep copy of tool whose inputSchema shows what cons allow.
// A constraint's key addresses params.arguments as the grant does:
// "args.a.b" is properties.a.properties.b, "args.tags.*" is
// properties.tags.items. A keyword the server already set is tightened
// (the smaller maximum, the larger minimum) or, when it cannot be (a
// second pattern, enum or const), the grant's is added under allOf, so
// both hold. denyUnknown closes the top-level object
// ("additionalProperties": false) and drops the properties no constraint
// names, which the broker would refuse. A schema that is not what a
// constraint expects (no such property, not an object) is left as it is:
// Narrow never fails, and the broker checks every call anyway.
func Narrow(tool map[string]any, cons map[string]Narrowing, denyUnknown bool) map[string]any {
	out, _ := deepCopy(tool).(map[string]any)
	schema, ok := out["inputSchema"].(map[string]any)
	if !ok {
		return out
	}
	keys := make([]string, 0, len(cons))
	for k := range cons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	named := map[string]bool{}
	for _, k := range keys {
		path, ok := strings.CutPrefix(k, "args.")
		if !ok || path == "" {
			continue
		}
		segs := strings.Split(path, ".")
		named[segs[0]] = true
		narrowPath(schema, segs, cons[k])
	}
	if denyUnknown {
		closeSchema(schema, named)
	}
	return out
}

// narrowPath finds the schema of the argument segs address under schema
// and applies n to it.
func narrowPath(schema map[string]any, segs []string, n Narrowing) {
	node, parent := schema, map[string]any(nil)
	for _, seg := range segs {
		var next map[string]any
		if seg == "*" {
			next, _ = node["items"].(map[string]any)
		} else {
			props, _ := node["properties"].(map[string]any)
			next, _ = props[seg].(map[string]any)
		}
		if next == nil {
			return
		}
		node, parent = next, node
	}
	last := segs[len(segs)-1]
	if n.HasPin {
		setOrAllOf(node, "const", n.Pin)
		if last != "*" {
			parent["required"] = without(parent["required"], last)
		}
	}
	if n.Required && !n.HasPin && last != "*" {
		parent["required"] = with(parent["required"], last)
	}
	if len(n.OneOf) > 0 {
		setOrAllOf(node, "enum", deepCopy(n.OneOf))
	}
	if n.Pattern != "" {
		setOrAllOf(node, "pattern", n.Pattern)
	}
	if n.Min != nil {
		tighten(node, "minimum", *n.Min, func(old, new float64) bool { return new > old })
	}
	if n.Max != nil {
		tighten(node, "maximum", *n.Max, func(old, new float64) bool { return new < old })
	}
	if n.MaxLength != nil {
		smaller := func(old, new float64) bool { return new < old }
		typ, _ := node["type"].(string)
		if typ != "array" {
			tighten(node, "maxLength", float64(*n.MaxLength), smaller)
		}
		if typ != "string" {
			tighten(node, "maxItems", float64(*n.MaxLength), smaller)
		}
	}
}

// closeSchema refuses, in the schema, what deny_unknown refuses: an
// argument no constraint names.
func closeSchema(schema map[string]any, named map[string]bool) {
	schema["additionalProperties"] = false
	if props, ok := schema["properties"].(map[string]any); ok {
		for name := range props {
			if !named[name] {
				delete(props, name)
				schema["required"] = without(schema["required"], name)
			}
		}
	}
	delete(schema, "patternProperties")
}

// setOrAllOf sets node[key] = v, or, when the server set another value,
// adds {key: v} to node's allOf so that both must hold.
func setOrAllOf(node map[string]any, key string, v any) {
	old, ok := node[key]
	if !ok {
		node[key] = v
		return
	}
	if equalCanonical(old, v) {
		return
	}
	all, ok := node["allOf"].([]any)
	if _, present := node["allOf"]; present && !ok {
		node[key] = v // an allOf that is not an array: the schema is broken; the grant's value shows
		return
	}
	node["allOf"] = append(all, map[string]any{key: v})
}

// tighten sets node[key] = v unless the server's value is already at least
// as tight (tighter(old, v) false).
func tighten(node map[string]any, key string, v float64, tighter func(old, new float64) bool) {
	if old, ok := number(node[key]); ok && !tighter(old, v) {
		return
	}
	node[key] = v
}

// without is a required list without name (the list itself when it is
// not an array).
func without(required any, name string) any {
	arr, ok := required.([]any)
	if !ok {
		return required
	}
	out := make([]any, 0, len(arr))
	for _, x := range arr {
		if x != name {
			out = append(out, x)
		}
	}
	return out
}

// with is a required list with name.
func with(required any, name string) any {
	arr, ok := required.([]any)
	if required != nil && !ok {
		return required
	}
	if slices.Contains(arr, any(name)) {
		return arr
	}
	return append(slices.Clone(arr), name)
}

// number is a schema keyword's numeric value.
func number(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case float64:
		return v, true
	case int:
		return float64(v), true
	}
	return 0, false
}

func equalCanonical(a, b any) bool {
	ca, err1 := Canonical(a)
	cb, err2 := Canonical(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

// deepCopy copies the maps and slices of a parsed JSON value.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if v == nil {
			return v
		}
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		if v == nil {
			return v
		}
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopy(x)
		}
		return out
	default:
		return v
	}
}
