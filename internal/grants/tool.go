package grants

import (
	"errors"
	"maps"
	"slices"
)

// Tool rules (DESIGN §10) allow an MCP tools/call of one tool. Their
// constraints address the call's arguments as args.PATH: dotted segments
// into params.arguments, matched as body keys are (by fold key; a case
// variant of the grant's spelling is refused), where a * segment means
// every element of an array (args.labels.*, args.items.*.qty). A * path is
// checked element by element; it can be neither pinned nor required.

// maxToolName is the longest tool name a rule may name.
const maxToolName = 128

// ValidateToolName checks a tool name as a rule, or the configuration,
// may name it: 1 to 128 characters of A-Z, a-z, 0-9, '_', '-' and '.'.
// Names match exactly (no globs, no case folding).
func ValidateToolName(name string) error {
	if name == "" || len(name) > maxToolName {
		return errors.New("must be 1 to 128 characters")
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return errors.New("may hold only letters, digits, '_', '-' and '.'")
		}
	}
	return nil
}

// validateToolShape checks what an mcp rule allows: a tool, and nothing
// of the other kinds' rules.
func validateToolShape(fe func(field, format string, args ...any) error, r *Rule) error {
	if r.Tool == "" {
		return fe(".tool", "is required: a rule in a grant on an mcp upstream names the tool it allows")
	}
	if err := ValidateToolName(r.Tool); err != nil {
		return fe(".tool", "%v", err)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"method", r.Method != ""}, {"path", r.Path != ""}, {"action", r.Action != ""},
		{"resource", r.Resource != ""}, {"websocket", r.WebSocket},
	} {
		if f.set {
			return fe("."+f.name, "an mcp rule names a tool; it takes no %s", f.name)
		}
	}
	return nil
}

// placeFor refuses a constrained parameter that a rule of kind cannot
// have: a tool rule's address its arguments (args.PATH) only, and only a
// tool rule's do.
func placeFor(p param, kind string) error {
	switch {
	case kind == "mcp" && p.loc != locArgs:
		return errors.New("a tool rule's constraints address the tool's arguments (args.PATH), not a request's path, query, headers or body")
	case kind != "mcp" && p.loc == locArgs:
		return errors.New("args.PATH addresses a tool's arguments: only a rule in a grant on an mcp upstream takes it")
	case p.loc == locArgs && p.body[0] == "*":
		return errors.New("the arguments are an object: * addresses the elements of an array (args.NAME.*)")
	}
	return nil
}

// lookupAll finds the values at path in doc, where a * segment stands for
// every element of an array: one value for a path without *, else one per
// element reached (elements lacking the rest of the path are skipped).
// found is false when the path up to its first * is absent; exact is false
// when a key on the way matched only by fold key (see lookup); arrays is
// false when a * met something other than an array.
func lookupAll(doc any, path []string) (vals []any, found, exact, arrays bool) {
	i := slices.Index(path, "*")
	if i < 0 {
		v, found, exact := lookup(doc, path)
		if found {
			vals = []any{v}
		}
		return vals, found, exact, true
	}
	v, found, exact := lookup(doc, path[:i])
	if !found {
		return nil, false, exact, true
	}
	elems, ok := v.([]any)
	if !ok {
		return nil, true, exact, false
	}
	vals = []any{}
	for _, e := range elems {
		sub, ok, ex, arr := lookupAll(e, path[i+1:])
		exact = exact && ex
		if !arr {
			return nil, true, exact, false
		}
		if ok {
			vals = append(vals, sub...)
		}
	}
	return vals, true, exact, true
}

// checkEach checks every value a * path reaches in doc. A * must meet an
// array; a key reached only through a case variant is refused, after the
// values' own checks.
func (ch *check) checkEach(doc any) error {
	vals, _, exact, arrays := lookupAll(doc, ch.p.body)
	if !arrays {
		return &Violation{Param: ch.p.key, Constraint: "type", Msg: "must be an array: * addresses each of its elements"}
	}
	for _, v := range vals {
		if err := ch.check(v); err != nil {
			return err
		}
	}
	if !exact {
		return misspelled(ch.p.key)
	}
	return nil
}

// unknownArg is the first (by fold key) top-level key of a tool call's
// arguments whose fold key no constraint names; ok is false when none.
func unknownArg(doc any, named map[string]bool) (arg string, ok bool) {
	m, _ := doc.(map[string]any)
	for k := range m {
		fk := foldKey(k)
		if !named[fk] && (!ok || fk < arg) {
			arg, ok = fk, true
		}
	}
	return truncate(arg, 64), ok
}

// Constrained returns, by key as the rule writes it, the values of the
// parameters the allowing rule's constraints name, as checked and with
// pins filled in: for a * path the list of the values it reached. Absent
// parameters are left out. They are the only values of a call an audit
// record may hold; nil when the rule constrains nothing.
func (d *Decision) Constrained() map[string]any {
	if d == nil || d.rule == nil || len(d.rule.checks) == 0 {
		return nil
	}
	m := make(map[string]any, len(d.rule.checks))
	for i := range d.rule.checks {
		p := d.rule.checks[i].p
		if v, ok := d.valueOf(p); ok {
			m[p.key] = v
		}
	}
	return m
}

// valueOf is p's value in what the decision forwards (a copy).
func (d *Decision) valueOf(p param) (any, bool) {
	switch p.loc {
	case locPath:
		return d.rule.pathValue(p.name, d.segments)
	case locQuery:
		for _, q := range d.Query {
			if q.Key == p.name {
				return q.Value, true
			}
		}
	case locHeader:
		if vals := d.Header[p.name]; len(vals) > 0 {
			return vals[0], true
		}
	case locBody, locArgs:
		vals, found, _, _ := lookupAll(d.Body, p.body)
		if !found {
			return nil, false
		}
		if !p.wild {
			return deepCopy(vals[0]), true
		}
		return deepCopy(vals), true
	}
	return nil, false
}

// ToolRule is a grant's rule for one tool, as a tools/list answer shows
// the tool: its constraints narrow the tool's input schema.
type ToolRule struct {
	Tool         string
	Constraints  map[string]Constraint // by key (args.PATH); a copy
	DenyUnknown  bool
	Irreversible bool // effective (Rule.IsIrreversible)
}

// ToolRules are the grant's rules that name a tool, in the grant's order.
func (l *Live) ToolRules() []ToolRule {
	var out []ToolRule
	for _, r := range l.Grant.Rules {
		if r.Tool == "" {
			continue
		}
		out = append(out, ToolRule{Tool: r.Tool, Constraints: maps.Clone(r.Constraints), DenyUnknown: r.DenyUnknown, Irreversible: r.IsIrreversible()})
	}
	return out
}
