package mcp

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustResult(t *testing.T, s string) map[string]any {
	t.Helper()
	m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"result":` + s + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return m.Result
}

func TestParseToolsList(t *testing.T) {
	res := mustResult(t, `{"tools":[{"name":"a","description":"A","inputSchema":{"type":"object"},"title":"x"},{"name":"b","inputSchema":{"type":"object"}}],"nextCursor":"c2","ttlMs":0}`)
	tools, cursor, err := ParseToolsList(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 2 || tools[0].Name != "a" || tools[1].Name != "b" || cursor != "c2" {
		t.Fatalf("tools %+v cursor %q", tools, cursor)
	}
	want, _ := Digest(map[string]any{"name": "a", "description": "A", "inputSchema": map[string]any{"type": "object"}})
	if tools[0].Digest != want {
		t.Errorf("digest %s, want %s (title is not pinned)", tools[0].Digest, want)
	}
	if _, cursor, err := ParseToolsList(mustResult(t, `{"tools":[]}`)); err != nil || cursor != "" {
		t.Errorf("empty page: %q, %v", cursor, err)
	}
	if _, cursor, err := ParseToolsList(mustResult(t, `{"tools":[],"nextCursor":null}`)); err != nil || cursor != "" {
		t.Errorf("null cursor: %q, %v", cursor, err)
	}

	bad := []struct{ name, in string }{
		{"no tools", `{}`},
		{"tools not an array", `{"tools":{"name":"a"}}`},
		{"tool not an object", `{"tools":["a"]}`},
		{"no name", `{"tools":[{"inputSchema":{}}]}`},
		{"empty name", `{"tools":[{"name":""}]}`},
		{"name not a string", `{"tools":[{"name":1}]}`},
		{"served twice", `{"tools":[{"name":"a","description":"safe"},{"name":"a","description":"evil"}]}`},
		{"cursor not a string", `{"tools":[],"nextCursor":2}`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ParseToolsList(mustResult(t, tt.in)); !errors.Is(err, ErrToolsList) {
				t.Errorf("ParseToolsList: %v, want ErrToolsList", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNarrow(t *testing.T) {
	const issue = `{"name":"create_issue","description":"d","inputSchema":{"type":"object","properties":{
		"repo":{"type":"string"},"title":{"type":"string","maxLength":500},"labels":{"type":"array","items":{"type":"string"}},
		"amount":{"type":"number","maximum":100,"minimum":0},"meta":{"type":"object","properties":{"team":{"type":"string","pattern":"^[a-z]+$"}},"required":["team"]},
		"body":{"type":"string"}},"required":["repo","title"]}}`
	tests := []struct {
		name        string
		tool        string
		cons        map[string]Narrowing
		denyUnknown bool
		want        string // the narrowed inputSchema
	}{
		{name: "pin becomes const and is no longer required", tool: issue,
			cons: map[string]Narrowing{"args.repo": {Pin: "acme/web", HasPin: true}},
			want: `{"type":"object","properties":{"repo":{"type":"string","const":"acme/web"},"title":{"type":"string","maxLength":500},"labels":{"type":"array","items":{"type":"string"}},
				"amount":{"type":"number","maximum":100,"minimum":0},"meta":{"type":"object","properties":{"team":{"type":"string","pattern":"^[a-z]+$"}},"required":["team"]},
				"body":{"type":"string"}},"required":["title"]}`},
		{name: "one_of on items, max_length tightens, pattern joins allOf, nested pin", tool: issue,
			cons: map[string]Narrowing{"args.labels.*": {OneOf: []any{"bug", "triage"}}, "args.title": {MaxLength: ptr(200)}, "args.labels": {MaxLength: ptr(3)},
				"args.meta.team": {Pattern: "^web$", Pin: "web", HasPin: true}},
			want: `{"type":"object","properties":{"repo":{"type":"string"},"title":{"type":"string","maxLength":200},"labels":{"type":"array","maxItems":3,"items":{"type":"string","enum":["bug","triage"]}},
				"amount":{"type":"number","maximum":100,"minimum":0},"meta":{"type":"object","properties":{"team":{"type":"string","const":"web","pattern":"^[a-z]+$","allOf":[{"pattern":"^web$"}]}},"required":[]},
				"body":{"type":"string"}},"required":["repo","title"]}`},
		{name: "min and max keep the tighter bound", tool: issue,
			cons: map[string]Narrowing{"args.amount": {Min: ptr(-5.0), Max: ptr(50.0)}},
			want: `{"type":"object","properties":{"repo":{"type":"string"},"title":{"type":"string","maxLength":500},"labels":{"type":"array","items":{"type":"string"}},
				"amount":{"type":"number","maximum":50,"minimum":0},"meta":{"type":"object","properties":{"team":{"type":"string","pattern":"^[a-z]+$"}},"required":["team"]},
				"body":{"type":"string"}},"required":["repo","title"]}`},
		{name: "deny_unknown closes the object and drops unnamed properties", tool: issue, denyUnknown: true,
			cons: map[string]Narrowing{"args.repo": {Pin: "acme/web", HasPin: true}, "args.labels.*": {OneOf: []any{"bug"}}, "args.body": {Required: true}},
			want: `{"type":"object","additionalProperties":false,"properties":{"repo":{"type":"string","const":"acme/web"},"labels":{"type":"array","items":{"type":"string","enum":["bug"]}},
				"body":{"type":"string"}},"required":["body"]}`},
		{name: "a server enum stays and the grant's joins", tool: `{"name":"t","inputSchema":{"properties":{"x":{"enum":["a","b","c"]}}}}`,
			cons: map[string]Narrowing{"args.x": {OneOf: []any{"a", "z"}}},
			want: `{"properties":{"x":{"enum":["a","b","c"],"allOf":[{"enum":["a","z"]}]}}}`},
		{name: "a pin of null", tool: `{"name":"t","inputSchema":{"properties":{"x":{}},"required":["x"]}}`,
			cons: map[string]Narrowing{"args.x": {Pin: nil, HasPin: true}},
			want: `{"properties":{"x":{"const":null}},"required":[]}`},
		{name: "untyped max_length sets both", tool: `{"name":"t","inputSchema":{"properties":{"x":{}}}}`,
			cons: map[string]Narrowing{"args.x": {MaxLength: ptr(4)}},
			want: `{"properties":{"x":{"maxLength":4,"maxItems":4}}}`},
		{name: "missing property left be", tool: `{"name":"t","inputSchema":{"type":"object"}}`,
			cons: map[string]Narrowing{"args.x": {Pin: "v", HasPin: true}, "args.y.*": {OneOf: []any{1.0}}, "x": {Pin: 1, HasPin: true}, "args.": {}},
			want: `{"type":"object"}`},
		{name: "odd schema shapes left be", tool: `{"name":"t","inputSchema":{"properties":{"x":"string","y":{"items":[{"type":"string"}]}},"required":"x","allOf":{}}}`,
			cons: map[string]Narrowing{"args.x": {Pin: "v", HasPin: true}, "args.y.*": {OneOf: []any{1.0}}},
			want: `{"properties":{"x":"string","y":{"items":[{"type":"string"}]}},"required":"x","allOf":{}}`},
		{name: "broken allOf is replaced by the grant's value", tool: `{"name":"t","inputSchema":{"properties":{"x":{"pattern":"a","allOf":7}}}}`,
			cons: map[string]Narrowing{"args.x": {Pattern: "b"}},
			want: `{"properties":{"x":{"pattern":"b","allOf":7}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := mustResult(t, tt.tool)
			before, _ := Canonical(tool)
			got := Narrow(tool, tt.cons, tt.denyUnknown)
			if after, _ := Canonical(tool); string(after) != string(before) {
				t.Error("Narrow changed the served tool")
			}
			gotSchema, err := Canonical(got["inputSchema"])
			if err != nil {
				t.Fatal(err)
			}
			wantSchema, _ := Canonical(decodeLoose(t, tt.want))
			if diff := cmp.Diff(string(wantSchema), string(gotSchema)); diff != "" {
				t.Errorf("inputSchema (-want +got):\n%s", diff)
			}
			if got["name"] != tool["name"] {
				t.Error("the name changed")
			}
		})
	}
}

func TestNarrowNoSchema(t *testing.T) {
	for _, in := range []map[string]any{nil, {"name": "t"}, {"name": "t", "inputSchema": "object"}, {"name": "t", "inputSchema": []any{}}} {
		got := Narrow(in, map[string]Narrowing{"args.x": {Pin: 1.0, HasPin: true}}, true)
		if a, b := mustCanon(t, got), mustCanon(t, in); a != b && in != nil {
			t.Errorf("Narrow(%v) = %s", in, a)
		}
	}
	// The copy is deep: changing it leaves the served tool alone.
	tool := map[string]any{"name": "t", "inputSchema": map[string]any{"properties": map[string]any{"x": map[string]any{"enum": []any{"a"}}}}}
	got := Narrow(tool, nil, false)
	got["inputSchema"].(map[string]any)["properties"].(map[string]any)["x"].(map[string]any)["enum"].([]any)[0] = "b"
	if tool["inputSchema"].(map[string]any)["properties"].(map[string]any)["x"].(map[string]any)["enum"].([]any)[0] != "a" {
		t.Error("Narrow's copy shares the served tool's slices")
	}
	// A narrowed tool encodes (floats of the grant's bounds as JSON numbers).
	n := Narrow(map[string]any{"name": "t", "inputSchema": map[string]any{"properties": map[string]any{"a": map[string]any{"maximum": json.Number("1e3")}}}},
		map[string]Narrowing{"args.a": {Max: ptr(500.0)}}, false)
	if b, err := EncodeResult(IntID(1), map[string]any{"tools": []any{n}}); err != nil || string(b) != `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"properties":{"a":{"maximum":500}}},"name":"t"}]}}` {
		t.Errorf("encoded %s, %v", b, err)
	}
}

func mustCanon(t *testing.T, v any) string {
	t.Helper()
	b, err := Canonical(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
