package mcp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Message
	}{
		{name: "request", in: `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"a/b"}}}`,
			want: &Message{ID: IntID(4), Method: "tools/call", Params: map[string]any{"name": "create_issue", "arguments": map[string]any{"repo": "a/b"}}}},
		{name: "string id", in: `{"jsonrpc":"2.0","id":"a\u0062","method":"ping"}`, want: &Message{ID: StringID("ab"), Method: "ping"}},
		{name: "TS's first id is 0", in: `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`,
			want: &Message{ID: IntID(0), Method: "initialize", Params: map[string]any{}}},
		{name: "negative id", in: `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`, want: &Message{ID: IntID(-9007199254740991), Method: "ping"}},
		{name: "notification", in: `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
			want: &Message{Method: "notifications/initialized", Params: map[string]any{}}},
		{name: "result", in: " \r\n\t" + `{"id":1,"jsonrpc":"2.0","result":{}}`, want: &Message{ID: IntID(1), Result: map[string]any{}}},
		{name: "error", in: `{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"bad","data":{"k":[1]},"extra":true}}`,
			want: &Message{ID: StringID("x"), Error: &WireError{Code: -32602, Message: "bad", Data: map[string]any{"k": []any{json.Number("1")}}}}},
		{name: "error with null id", in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
			want: &Message{ID: NullID, Error: &WireError{Code: -32700, Message: "parse error"}}},
		{name: "tiny numbers underflow to 0, read alike", in: `{"jsonrpc":"2.0","method":"x","params":{"n":1e-400}}`,
			want: &Message{Method: "x", Params: map[string]any{"n": json.Number("1e-400")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(ID{})); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseRefuses: one row per way a hostile sandbox (or upstream) can
// make two readers see two messages.
func TestParseRefuses(t *testing.T) {
	deep := `{"jsonrpc":"2.0","method":"x","params":{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`
	tests := []struct {
		name string
		in   string
		want error
	}{
		{name: "batch", in: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, want: ErrBatch},
		{name: "batch after whitespace", in: "\n [ ]", want: ErrBatch},
		{name: "malformed", in: `{"jsonrpc":"2.0",`, want: ErrParse},
		{name: "empty", in: ``, want: ErrParse},
		{name: "trailing data", in: `{"jsonrpc":"2.0","method":"ping"} {}`, want: ErrParse},
		{name: "not UTF-8", in: "{\"jsonrpc\":\"2.0\",\"method\":\"p\xffing\"}", want: ErrParse},
		{name: "duplicate name", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`, want: ErrParse},
		{name: "case variant of name", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Name":"b"}}`, want: ErrParse},
		{name: "escaped duplicate", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","\u006eame":"b"}}`, want: ErrParse},
		{name: "Kelvin sign folds to k", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":1,"\u212a":2}}}`, want: ErrParse},
		{name: "duplicate method", in: `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, want: ErrParse},
		{name: "duplicate deep in arguments", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[{"y":1,"Y":2}]}}}`, want: ErrParse},
		{name: "too deep", in: deep, want: ErrParse},
		{name: "1e400", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"amount":1e400}}}`, want: ErrParse},
		{name: "-1e400 in a result", in: `{"jsonrpc":"2.0","id":1,"result":{"n":-1e400}}`, want: ErrParse},
		{name: "not an object", in: `"ping"`, want: ErrInvalidRequest},
		{name: "null", in: `null`, want: ErrInvalidRequest},
		{name: "no jsonrpc", in: `{"id":1,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "jsonrpc 1.0", in: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "jsonrpc number", in: `{"jsonrpc":2.0,"id":1,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "unknown member", in: `{"jsonrpc":"2.0","id":1,"method":"ping","Params":{}}`, want: ErrInvalidRequest},
		{name: "null id", in: `{"jsonrpc":"2.0","id":null,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "fractional id", in: `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "integral id with a fraction", in: `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "exponent id", in: `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "huge id", in: `{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "id 2^53", in: `{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "object id", in: `{"jsonrpc":"2.0","id":{},"method":"ping"}`, want: ErrInvalidRequest},
		{name: "bool id", in: `{"jsonrpc":"2.0","id":true,"method":"ping"}`, want: ErrInvalidRequest},
		{name: "method not a string", in: `{"jsonrpc":"2.0","id":1,"method":1}`, want: ErrInvalidRequest},
		{name: "empty method", in: `{"jsonrpc":"2.0","id":1,"method":""}`, want: ErrInvalidRequest},
		{name: "array params", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["a"]}`, want: ErrInvalidRequest},
		{name: "null params", in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`, want: ErrInvalidRequest},
		{name: "request with result", in: `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, want: ErrInvalidRequest},
		{name: "request with error", in: `{"jsonrpc":"2.0","id":1,"method":"ping","error":{"code":1,"message":""}}`, want: ErrInvalidRequest},
		{name: "neither method nor id", in: `{"jsonrpc":"2.0","result":{}}`, want: ErrInvalidRequest},
		{name: "response without result or error", in: `{"jsonrpc":"2.0","id":1}`, want: ErrInvalidRequest},
		{name: "result and error", in: `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":""}}`, want: ErrInvalidRequest},
		{name: "result with null id", in: `{"jsonrpc":"2.0","id":null,"result":{}}`, want: ErrInvalidRequest},
		{name: "result not an object", in: `{"jsonrpc":"2.0","id":1,"result":"ok"}`, want: ErrInvalidRequest},
		{name: "response with params", in: `{"jsonrpc":"2.0","id":1,"result":{},"params":{}}`, want: ErrInvalidRequest},
		{name: "error code fractional", in: `{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":""}}`, want: ErrInvalidRequest},
		{name: "error code huge", in: `{"jsonrpc":"2.0","id":1,"error":{"code":99999999999,"message":""}}`, want: ErrInvalidRequest},
		{name: "error without message", in: `{"jsonrpc":"2.0","id":1,"error":{"code":1}}`, want: ErrInvalidRequest},
		{name: "error not an object", in: `{"jsonrpc":"2.0","id":1,"error":"boom"}`, want: ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %+v, %v; want %v", got, err, tt.want)
			}
			code, ok := RPCCode(err)
			wantCode := map[error]int{ErrBatch: CodeInvalidRequest, ErrParse: CodeParseError, ErrInvalidRequest: CodeInvalidRequest}[tt.want]
			if !ok || code != wantCode {
				t.Errorf("RPCCode = %d, %v; want %d", code, ok, wantCode)
			}
		})
	}
}

func TestMessageKinds(t *testing.T) {
	tests := []struct {
		in                   string
		req, notif, response bool
	}{
		{in: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, req: true},
		{in: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, notif: true},
		{in: `{"jsonrpc":"2.0","id":1,"result":{}}`, response: true},
		{in: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}`, response: true},
	}
	for _, tt := range tests {
		m, err := Parse([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if m.IsRequest() != tt.req || m.IsNotification() != tt.notif || m.IsResponse() != tt.response {
			t.Errorf("%s: request %v notification %v response %v", tt.in, m.IsRequest(), m.IsNotification(), m.IsResponse())
		}
	}
}

func TestToolCall(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantName string
		wantArgs map[string]any
		wantErr  bool
	}{
		{name: "ok", in: `{"name":"t","arguments":{"a":1}}`, wantName: "t", wantArgs: map[string]any{"a": json.Number("1")}},
		{name: "no arguments", in: `{"name":"t"}`, wantName: "t", wantArgs: map[string]any{}},
		{name: "null arguments", in: `{"name":"t","arguments":null}`, wantName: "t", wantArgs: map[string]any{}},
		{name: "array arguments", in: `{"name":"t","arguments":[1]}`, wantErr: true},
		{name: "string arguments", in: `{"name":"t","arguments":"{}"}`, wantErr: true},
		{name: "no name", in: `{"arguments":{}}`, wantErr: true},
		{name: "empty name", in: `{"name":""}`, wantErr: true},
		{name: "name not a string", in: `{"name":["t"]}`, wantErr: true},
		{name: "Arguments for a case-insensitive reader", in: `{"name":"t","Arguments":{"a":1}}`, wantErr: true},
		{name: "NAME", in: `{"NAME":"u","arguments":{}}`, wantErr: true},
		{name: "long s folds to s", in: `{"name":"t","argument\u017f":{"a":1}}`, wantErr: true},
		{name: "_META", in: `{"name":"t","_META":{"progressToken":1}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + tt.in + `}`))
			if err != nil {
				t.Fatal(err)
			}
			name, args, err := m.ToolCall()
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidParams) {
					t.Fatalf("ToolCall = %q, %v, %v; want ErrInvalidParams", name, args, err)
				}
				if code, _ := RPCCode(err); code != CodeArgument {
					t.Errorf("RPCCode = %d, want %d", code, CodeArgument)
				}
				return
			}
			if err != nil || name != tt.wantName {
				t.Fatalf("ToolCall = %q, %v", name, err)
			}
			if diff := cmp.Diff(tt.wantArgs, args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
	if _, _, err := (&Message{ID: IntID(1), Method: "ping"}).ToolCall(); err == nil {
		t.Error("ToolCall of a ping did not fail")
	}
}

func TestMetaAccessors(t *testing.T) {
	tests := []struct {
		name      string
		params    string
		wantToken any
		wantVer   string
	}{
		{name: "string token", params: `{"_meta":{"progressToken":"p1"}}`, wantToken: "p1"},
		{name: "integer token", params: `{"_meta":{"progressToken":7}}`, wantToken: json.Number("7")},
		{name: "fractional token", params: `{"_meta":{"progressToken":7.5}}`},
		{name: "object token", params: `{"_meta":{"progressToken":{}}}`},
		{name: "null token", params: `{"_meta":{"progressToken":null}}`},
		{name: "meta not an object", params: `{"_meta":"progressToken"}`},
		{name: "version", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, wantVer: V20260728},
		{name: "version not a string", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}`},
		{name: "no params", params: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`
			if tt.params != "" {
				in = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + tt.params + `}`
			}
			m, err := Parse([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			tok, ok := m.ProgressToken()
			if ok != (tt.wantToken != nil) || tok != tt.wantToken {
				t.Errorf("ProgressToken = %v, %v; want %v", tok, ok, tt.wantToken)
			}
			v, ok := m.MetaVersion()
			if ok != (tt.wantVer != "") || v != tt.wantVer {
				t.Errorf("MetaVersion = %q, %v; want %q", v, ok, tt.wantVer)
			}
		})
	}
}

func TestHeaderName(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`, want: "t", wantOK: true},
		{in: `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x"}}`, want: "file:///x", wantOK: true},
		{in: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`},
		{in: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
	}
	for _, tt := range tests {
		m, err := Parse([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := m.HeaderName(); got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: HeaderName = %q, %v", tt.in, got, ok)
		}
	}
}

func TestEncodeRequest(t *testing.T) {
	tests := []struct {
		name   string
		id     ID
		method string
		params map[string]any
		meta   map[string]any
		want   string
	}{
		{name: "sandbox _meta is dropped", id: IntID(3), method: "tools/call",
			params: map[string]any{"name": "t", "arguments": map[string]any{"b": json.Number("12345678901234567890"), "a": "x"},
				"_meta": map[string]any{"progressToken": "p", "evil": "x"}},
			want: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"a":"x","b":12345678901234567890},"name":"t"}}`},
		{name: "meta rebuilt from the argument", id: StringID("s"), method: "tools/call",
			params: map[string]any{"name": "t", "_meta": map[string]any{"evil": "x"}},
			meta:   map[string]any{MetaProgressToken: json.Number("7"), MetaProtocolVersion: V20260728},
			want:   `{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7},"name":"t"}}`},
		{name: "no params", id: IntID(1), method: "tools/list", want: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{name: "meta only", id: IntID(1), method: "tools/list", meta: map[string]any{MetaProtocolVersion: V20260728},
			want: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`},
		{name: "escapes", id: IntID(1), method: "tools/call", params: map[string]any{"name": "a\"\n\u2028<"},
			want: "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\\\"\\n\u2028<\"}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeRequest(tt.id, tt.method, tt.params, tt.meta)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("EncodeRequest (-want +got):\n%s", diff)
			}
			if _, err := Parse(got); err != nil {
				t.Errorf("the broker's own request does not parse: %v", err)
			}
		})
	}
	if _, err := EncodeRequest(ID{}, "ping", nil, nil); err == nil {
		t.Error("a request without an id encoded")
	}
	if _, err := EncodeRequest(IntID(1), "", nil, nil); err == nil {
		t.Error("a request without a method encoded")
	}
	if _, err := EncodeRequest(IntID(1), "x", map[string]any{"n": json.Number("1e400")}, nil); err == nil {
		t.Error("an infinite number encoded")
	}
}

func TestEncodeAnswers(t *testing.T) {
	tests := []struct {
		name   string
		encode func() ([]byte, error)
		want   string
	}{
		{name: "result echoes the id", encode: func() ([]byte, error) {
			m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":"\u00e9\u0001","method":"ping"}`))
			return EncodeResult(m.ID, nil)
		}, want: "{\"jsonrpc\":\"2.0\",\"id\":\"é\\u0001\",\"result\":{}}"},
		{name: "result", encode: func() ([]byte, error) {
			return EncodeResult(IntID(2), map[string]any{"content": []any{map[string]any{"type": "text", "text": "hi"}}, "isError": true})
		}, want: `{"jsonrpc":"2.0","id":2,"result":{"content":[{"text":"hi","type":"text"}],"isError":true}}`},
		{name: "error", encode: func() ([]byte, error) {
			return EncodeError(IntID(2), CodeRefused, "no grant allows this call", map[string]any{"code": "no_matching_grant"})
		}, want: `{"jsonrpc":"2.0","id":2,"error":{"code":-32010,"data":{"code":"no_matching_grant"},"message":"no grant allows this call"}}`},
		{name: "error to an unreadable id", encode: func() ([]byte, error) { return EncodeError(ID{}, CodeParseError, "parse error", nil) },
			want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`},
		{name: "notification keeps its params", encode: func() ([]byte, error) {
			return EncodeNotification(MethodProgress, map[string]any{"progressToken": "p", "progress": 1, "_meta": map[string]any{"k": "v"}})
		}, want: `{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{"k":"v"},"progress":1,"progressToken":"p"}}`},
		{name: "notification without params", encode: func() ([]byte, error) { return EncodeNotification(MethodInitialized, nil) },
			want: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.encode()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if _, err := Parse(got); err != nil {
				t.Errorf("the broker's own message does not parse: %v", err)
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	for _, tt := range []struct {
		v         string
		stateless bool
		supported bool
	}{{V20250618, false, true}, {V20251125, false, true}, {V20260728, true, true}, {"2025-03-26", false, false}, {"2027-01-01", true, false}} {
		if Stateless(tt.v) != tt.stateless || IsSupported(tt.v) != tt.supported {
			t.Errorf("%s: Stateless %v IsSupported %v", tt.v, Stateless(tt.v), IsSupported(tt.v))
		}
	}
}

func TestToolCallParams(t *testing.T) {
	m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","requestState":"s","inputResponses":{},"_meta":{"progressToken":1,"x":2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	name, args, err := m.ToolCall()
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := m.ProgressToken()
	out, err := EncodeRequest(m.ID, MethodToolsCall, ToolCallParams(name, args), map[string]any{MetaProgressToken: tok})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":1},"arguments":{},"name":"t"}}`; string(out) != want {
		t.Errorf("forwarded %s, want %s", out, want)
	}
	if got := ToolCallParams("t", nil); got["arguments"] == nil {
		t.Error("nil arguments are not {}")
	}
}

func TestProgressTokenBounded(t *testing.T) {
	for _, tc := range []struct {
		token string
		ok    bool
	}{{`"t-1"`, true}, {`7`, true}, {`1.5`, false}, {`{}`, false}, {`"` + strings.Repeat("x", maxProgressToken) + `"`, true}, {`"` + strings.Repeat("x", maxProgressToken+1) + `"`, false}} {
		m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":` + tc.token + `},"name":"x"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.ProgressToken(); ok != tc.ok {
			t.Errorf("token %.20s…: ok = %v, want %v", tc.token, ok, tc.ok)
		}
	}
}
