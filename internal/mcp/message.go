package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
)

// The errors of parsing a message. Each is a bad request (fault.BadRequest)
// and has its JSON-RPC code (RPCCode).
var (
	// ErrBatch is a JSON-RPC batch (a top-level array): refused whole,
	// nothing in it is read or forwarded.
	ErrBatch = fault.New(fault.BadRequest, "JSON-RPC batches are not accepted")
	// ErrParse is a message that is not JSON the broker accepts: malformed,
	// not UTF-8, duplicate or case-fold-equal keys at any depth, nested too
	// deeply, or a number outside float64's range.
	ErrParse = fault.New(fault.BadRequest, "malformed JSON-RPC message")
	// ErrInvalidRequest is JSON that is not a JSON-RPC 2.0 message.
	ErrInvalidRequest = fault.New(fault.BadRequest, "invalid JSON-RPC message")
	// ErrInvalidParams is a request whose params are not what its method
	// takes (a tools/call without a name).
	ErrInvalidParams = fault.New(fault.BadRequest, "invalid params")
)

// RPCCode is the JSON-RPC error code of an error of this package's parsing
// (ErrParse, ErrBatch, ErrInvalidRequest, ErrInvalidParams); false for any
// other error, whose code is the caller's to choose (CodeArgument for an
// argument refusal, CodeRefused otherwise).
func RPCCode(err error) (int, bool) {
	for _, c := range []struct {
		err  error
		code int
	}{{ErrParse, CodeParseError}, {ErrBatch, CodeInvalidRequest}, {ErrInvalidRequest, CodeInvalidRequest}, {ErrInvalidParams, CodeArgument}} {
		if errors.Is(err, c.err) {
			return c.code, true
		}
	}
	return 0, false
}

// maxSafeInteger is the largest integer every JSON reader holds exactly
// (2^53-1): a larger request id would not come back as itself.
const maxSafeInteger = 1<<53 - 1

// ID is a JSON-RPC id: a string or an integer, held as the JSON text the
// broker writes for it, so an answer echoes it exactly. The zero ID is no
// id (a notification); NullID is the null id of an error answering a
// message whose id could not be read. IDs are comparable.
type ID struct{ raw string }

// NullID is the id of an error response to a message without a readable id.
var NullID = ID{raw: "null"}

// StringID is the id s (a string that is not UTF-8 has its bad bytes
// replaced by U+FFFD).
func StringID(s string) ID {
	b, _ := marshalWire(strings.ToValidUTF8(s, "\uFFFD")) // cannot fail on valid UTF-8
	return ID{raw: string(b)}
}

// IntID is the id n.
func IntID(n int64) ID { return ID{raw: strconv.FormatInt(n, 10)} }

// IsZero reports whether id is absent.
func (id ID) IsZero() bool { return id.raw == "" }

// IsNull reports whether id is the null id.
func (id ID) IsNull() bool { return id.raw == "null" }

// String is the id's JSON text ("" when absent).
func (id ID) String() string { return id.raw }

// MarshalJSON writes the id's JSON text (null when absent).
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// Message is one JSON-RPC 2.0 message, as checked by Parse. Exactly one of
// the forms holds: a request (ID and Method), a notification (Method, no
// ID) or a response (ID and Result or Error).
type Message struct {
	ID     ID
	Method string
	// Params are the request's or notification's params, nil when absent.
	Params map[string]any
	// Result is a response's result (an object, as every MCP result is).
	Result map[string]any
	// Error is an error response's error.
	Error *WireError
}

// WireError is a JSON-RPC error object.
type WireError struct {
	Code    int
	Message string
	Data    any
}

// Error is the error's code and message, so a WireError is an error.
func (e *WireError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// IsRequest reports whether m is a request (a call awaiting a response).
func (m *Message) IsRequest() bool { return m.Method != "" && !m.ID.IsZero() }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID.IsZero() }

// IsResponse reports whether m is a response (a result or an error).
func (m *Message) IsResponse() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

// Parse reads one JSON-RPC message strictly, as the broker reads a JSON
// body (DESIGN §4, §10): a batch is ErrBatch; malformed JSON, duplicate or
// case-fold-equal keys at any depth, nesting past the JSON body cap and
// numbers outside float64's range are ErrParse; anything but an object of
// "jsonrpc":"2.0" and the members of one request, notification or
// response is ErrInvalidRequest. A request's id is a string or an integer
// of at most 2^53-1 in magnitude (never null, fractional or exponent-
// written); only an error response may have the null id. params and result
// are objects. The caller bounds the message's size before.
func Parse(data []byte) (*Message, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		return nil, ErrBatch
	}
	v, err := grants.ParseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	if err := checkNumbers(v, 0); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalid("a message is a JSON object")
	}
	for k := range obj {
		switch k {
		case "jsonrpc", "id", "method", "params", "result", "error":
		default:
			return nil, invalid("unknown member %q", truncate(k, 64))
		}
	}
	if obj["jsonrpc"] != "2.0" {
		return nil, invalid(`"jsonrpc" must be "2.0"`)
	}
	if _, ok := obj["method"]; ok {
		return parseCall(obj)
	}
	return parseResponse(obj)
}

func parseCall(obj map[string]any) (*Message, error) {
	method, ok := obj["method"].(string)
	if !ok || method == "" {
		return nil, invalid(`"method" must be a non-empty string`)
	}
	if _, ok := obj["result"]; ok {
		return nil, invalid(`a request has no "result"`)
	}
	if _, ok := obj["error"]; ok {
		return nil, invalid(`a request has no "error"`)
	}
	m := &Message{Method: method}
	if raw, ok := obj["id"]; ok {
		id, err := parseID(raw)
		if err != nil {
			return nil, err
		}
		m.ID = id
	}
	if raw, ok := obj["params"]; ok {
		p, ok := raw.(map[string]any)
		if !ok {
			return nil, invalid(`"params" must be an object`)
		}
		m.Params = p
	}
	return m, nil
}

func parseResponse(obj map[string]any) (*Message, error) {
	if _, ok := obj["params"]; ok {
		return nil, invalid(`a response has no "params"`)
	}
	raw, ok := obj["id"]
	if !ok {
		return nil, invalid(`a message needs "method" or "id"`)
	}
	res, hasResult := obj["result"]
	e, hasError := obj["error"]
	if hasResult == hasError {
		return nil, invalid(`a response has exactly one of "result" and "error"`)
	}
	m := &Message{}
	if raw == nil && hasError {
		m.ID = NullID
	} else {
		id, err := parseID(raw)
		if err != nil {
			return nil, err
		}
		m.ID = id
	}
	if hasResult {
		r, ok := res.(map[string]any)
		if !ok {
			return nil, invalid(`"result" must be an object`)
		}
		m.Result = r
		return m, nil
	}
	we, err := parseWireError(e)
	if err != nil {
		return nil, err
	}
	m.Error = we
	return m, nil
}

// parseWireError reads an error object: an integer code, a string message
// and any data; other members are dropped.
func parseWireError(v any) (*WireError, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalid(`"error" must be an object`)
	}
	n, ok := obj["code"].(json.Number)
	if !ok || !isInteger(string(n)) {
		return nil, invalid(`"error.code" must be an integer`)
	}
	code, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil {
		return nil, invalid(`"error.code" is out of range`)
	}
	msg, ok := obj["message"].(string)
	if !ok {
		return nil, invalid(`"error.message" must be a string`)
	}
	return &WireError{Code: int(code), Message: msg, Data: obj["data"]}, nil
}

// parseID reads a request id: a string, or an integer written as one
// (no fraction, no exponent) of magnitude at most 2^53-1.
func parseID(v any) (ID, error) {
	switch v := v.(type) {
	case string:
		return StringID(v), nil
	case json.Number:
		s := string(v)
		if !isInteger(s) {
			return ID{}, invalid(`"id" must be a string or an integer`)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > maxSafeInteger || n < -maxSafeInteger {
			return ID{}, invalid(`"id" is out of range`)
		}
		return ID{raw: s}, nil
	case nil:
		return ID{}, invalid(`"id" must not be null`)
	default:
		return ID{}, invalid(`"id" must be a string or an integer`)
	}
}

// isInteger reports whether s is an integer in JSON's grammar: -?(0|[1-9][0-9]*).
func isInteger(s string) bool {
	return isJSONNumber(s) && !strings.ContainsAny(s, ".eE")
}

// checkNumbers refuses a number outside float64's range anywhere in v:
// readers disagree on it (an error, an infinity, a big integer).
func checkNumbers(v any, depth int) error {
	switch v := v.(type) {
	case json.Number:
		if f, err := strconv.ParseFloat(string(v), 64); err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%w: number %s is out of range", ErrParse, truncate(string(v), 32))
		}
	case map[string]any:
		for _, x := range v {
			if err := checkNumbers(x, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := checkNumbers(x, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

func invalidParams(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidParams}, args...)...)
}

// ToolCall is a tools/call request's tool name and arguments: params.name
// a non-empty string, params.arguments an object, or absent or null (an
// empty map then). The map is the message's own. A malformed call is
// ErrInvalidParams, and so is a params member that only a case-insensitive
// reader (Go's encoding/json) takes for name, arguments or _meta
// ("Arguments", "NAME", "ſ" for "s"): the broker and such a server would
// read two calls.
func (m *Message) ToolCall() (name string, args map[string]any, err error) {
	if m.Method != MethodToolsCall {
		return "", nil, invalidParams("not a tools/call request")
	}
	for k := range m.Params {
		for _, member := range []string{"name", "arguments", "_meta"} {
			if k != member && strings.EqualFold(k, member) {
				return "", nil, invalidParams("%q is not %q: a case-insensitive reader would take it for that", truncate(k, 64), member)
			}
		}
	}
	name, ok := m.Params["name"].(string)
	if !ok || name == "" {
		return "", nil, invalidParams(`"params.name" must be a non-empty string`)
	}
	switch a := m.Params["arguments"].(type) {
	case nil:
		return name, map[string]any{}, nil
	case map[string]any:
		return name, a, nil
	default:
		return "", nil, invalidParams(`"params.arguments" must be an object`)
	}
}

// ToolCallParams are the params of the tools/call the broker forwards:
// the name and the arguments it checked (pins filled in), and nothing
// else of what the sandbox sent (inputResponses, requestState and the
// like are of features the broker does not relay). EncodeRequest adds the
// broker's _meta.
func ToolCallParams(name string, args map[string]any) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"name": name, "arguments": args}
}

// Meta is params._meta when it is an object, else nil.
func (m *Message) Meta() map[string]any {
	meta, _ := m.Params["_meta"].(map[string]any)
	return meta
}

// ProgressToken is params._meta.progressToken when it is a string of at
// most maxProgressToken bytes or an integer (a json.Number), the forms MCP
// gives it.
func (m *Message) ProgressToken() (any, bool) {
	switch t := m.Meta()[MetaProgressToken].(type) {
	case string:
		if len(t) <= maxProgressToken {
			return t, true
		}
	case json.Number:
		if isInteger(string(t)) {
			return t, true
		}
	}
	return nil, false
}

// maxProgressToken bounds a string progress token the broker echoes (in
// every progress notification of a call): a longer one asks for none.
const maxProgressToken = 256

// MetaVersion is the protocol version a stateless-era request names in
// params._meta (MetaProtocolVersion).
func (m *Message) MetaVersion() (string, bool) {
	v, ok := m.Meta()[MetaProtocolVersion].(string)
	return v, ok && v != ""
}

// HeaderName is what the stateless era's Mcp-Name header must equal for
// this request: params.name of tools/call and prompts/get, params.uri of
// resources/read; false for other methods (which send no Mcp-Name).
func (m *Message) HeaderName() (string, bool) {
	key := ""
	switch m.Method {
	case MethodToolsCall, "prompts/get":
		key = "name"
	case "resources/read":
		key = "uri"
	default:
		return "", false
	}
	v, ok := m.Params[key].(string)
	return v, ok
}
