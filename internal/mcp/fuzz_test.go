package mcp

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// fuzzSeeds are tricky messages: duplicate and case-fold-equal keys, keys
// written with escapes, deep nesting, numbers past float64's precision or
// range, -0, unicode escapes and lone surrogates.
var fuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"acme/web","title":"x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Name":"b"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"b","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Arguments":{"repo":"evil"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","argument\u017f":{"repo":"evil"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{},"inputResponses":{"k":{}},"requestState":"s","task":{"ttl":1}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"\u006eame":"a","arguments":{"\u0072epo":"x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"repo":"x","REPO":"y"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":1,"\u212a":2}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{"d":1}]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"n":1e400}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"n":12345678901234567890,"m":-0,"f":1.0e-7,"g":100.000}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"n":1e-400,"big":179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791}}}`,
	`{"jsonrpc":"2.0","id":"\ud800","method":"tools/call","params":{"name":"\ud83d\ude00\udc00","arguments":{"s":"\u0000\u001f\u2028\"\\/"}}}`,
	`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"a","arguments":null,"_meta":{"progressToken":"p","evil":true}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"_meta":{"x":1},"inputResponses":{}}},"requestState":"s"}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}]`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\xff\"}}",
	"\ufeff{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\"}}",
	`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"a"}}`,
	`{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"a"}}`,
}

// FuzzParse: whatever a sandbox sends, a tools/call the broker accepts and
// re-serializes reaches an MCP server built on the go-sdk as exactly the
// tool name and arguments the broker checked (the same JCS form), with the
// same id, and with no _meta but the broker's.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if _, ok := RPCCode(err); !ok {
				t.Fatalf("Parse error without a JSON-RPC code: %v", err)
			}
			return
		}
		if !m.IsRequest() && !m.IsNotification() && !m.IsResponse() {
			t.Fatalf("Parse accepted a message of no kind: %+v", m)
		}
		if m.Method != MethodToolsCall || !m.IsRequest() {
			return
		}
		name, args, err := m.ToolCall()
		if err != nil {
			return
		}
		checked, err := Canonical(args)
		if err != nil {
			t.Fatalf("accepted arguments have no canonical form: %v", err)
		}
		meta := map[string]any{MetaProtocolVersion: V20260728}
		if tok, ok := m.ProgressToken(); ok {
			meta[MetaProgressToken] = tok
		}
		out, err := EncodeRequest(m.ID, m.Method, ToolCallParams(name, args), meta)
		if err != nil {
			t.Fatalf("EncodeRequest of a checked call: %v", err)
		}
		sdkSees(t, out, m.ID, name, string(checked), meta)
		// The broker reads its own bytes back as the same call.
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("the forwarded call does not parse: %v\n%s", err, out)
		}
		n2, a2, err := again.ToolCall()
		if err != nil || n2 != name || mustCanonF(t, a2) != string(checked) || again.ID != m.ID {
			t.Fatalf("the forwarded call reads back as %q %v (%v)", n2, a2, err)
		}
	})
}

// sdkSees decodes the forwarded bytes as a go-sdk server does and checks
// they are the call the broker checked.
func sdkSees(t *testing.T, out []byte, id ID, name, checked string, meta map[string]any) {
	t.Helper()
	msg, err := jsonrpc.DecodeMessage(out)
	if err != nil {
		t.Fatalf("the go-sdk refuses the forwarded call: %v\n%s", err, out)
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != MethodToolsCall || !req.IsCall() {
		t.Fatalf("the go-sdk reads %T %+v", msg, msg)
	}
	var want any // the broker's id as a value: a string, or an integer (at most 2^53-1) as float64
	if err := json.Unmarshal([]byte(id.String()), &want); err != nil {
		t.Fatalf("the broker's id %s: %v", id, err)
	}
	switch got := req.ID.Raw().(type) {
	case string:
		if want != got {
			t.Fatalf("the go-sdk reads id %q, the broker %s", got, id)
		}
	case int64:
		if f, ok := want.(float64); !ok || f != float64(got) {
			t.Fatalf("the go-sdk reads id %d, the broker %s", got, id)
		}
	default:
		t.Fatalf("the go-sdk reads id %v (%T), the broker %s", got, got, id)
	}
	// The go-sdk's server reads params with its internal/json (segmentio,
	// case-sensitive struct fields); a typed handler's arguments likewise,
	// a raw handler's with whatever the tool's author uses (encoding/json).
	for _, dec := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"segmentio as the go-sdk sets it", sdkUnmarshal}, {"encoding/json", json.Unmarshal}} {
		var p sdk.CallToolParamsRaw
		if err := dec.unmarshal(req.Params, &p); err != nil {
			t.Fatalf("%s: the params do not decode: %v", dec.name, err)
		}
		if p.Name != name {
			t.Fatalf("%s: the server reads tool %q, the broker checked %q", dec.name, p.Name, name)
		}
		var args any
		if err := dec.unmarshal(p.Arguments, &args); err != nil {
			t.Fatalf("%s: the arguments do not decode: %v", dec.name, err)
		}
		if got := mustCanonF(t, args); got != checked {
			t.Fatalf("%s: the server reads arguments %s, the broker checked %s", dec.name, got, checked)
		}
		if got, want := mustCanonF(t, map[string]any(p.Meta)), mustCanonF(t, meta); got != want {
			t.Fatalf("%s: the server reads _meta %s, the broker set %s", dec.name, got, want)
		}
	}
}

// sdkUnmarshal decodes as the go-sdk's internal/json does.
func sdkUnmarshal(data []byte, v any) error {
	dec := segjson.NewDecoder(bytes.NewReader(data))
	dec.DontMatchCaseInsensitiveStructFields()
	return dec.Decode(v)
}

func mustCanonF(t *testing.T, v any) string {
	t.Helper()
	b, err := Canonical(v)
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	return string(b)
}
