package mcp

import (
	"errors"
	"maps"
)

// EncodeRequest is the request the broker sends: re-serialized from the
// params it checked, never the bytes it read. params' own _meta is dropped
// and rebuilt from meta alone (the progressToken and version keys the
// broker chose to keep or set; nothing else of a sandbox's _meta passes);
// no meta and no params leave "params" out. Object members are sorted
// (JCS order) and numbers are written as they were read.
func EncodeRequest(id ID, method string, params map[string]any, meta map[string]any) ([]byte, error) {
	if id.IsZero() || id.IsNull() {
		return nil, errors.New("mcp: a request needs an id")
	}
	return encodeCall(id, method, params, meta)
}

// EncodeNotification is a notification of method with params (as given,
// _meta included; nil params leave "params" out).
func EncodeNotification(method string, params map[string]any) ([]byte, error) {
	meta, _ := params["_meta"].(map[string]any)
	return encodeCall(ID{}, method, params, meta)
}

func encodeCall(id ID, method string, params, meta map[string]any) ([]byte, error) {
	if method == "" {
		return nil, errors.New("mcp: a request needs a method")
	}
	var p map[string]any
	if params != nil || len(meta) > 0 {
		p = make(map[string]any, len(params)+1)
		maps.Copy(p, params)
		delete(p, "_meta")
		if len(meta) > 0 {
			p["_meta"] = meta
		}
	}
	// One buffer for the whole message.
	e := encoder{buf: append(make([]byte, 0, 512), `{"jsonrpc":"2.0"`...)}
	if !id.IsZero() {
		e.buf = append(append(e.buf, `,"id":`...), id.raw...)
	}
	e.buf = append(e.buf, `,"method":`...)
	if err := e.string(method); err != nil {
		return nil, err
	}
	if p != nil {
		e.buf = append(e.buf, `,"params":`...)
		if err := e.value(p, 0); err != nil {
			return nil, err
		}
	}
	return append(e.buf, '}'), nil
}

// EncodeResult is the response with result (nil writes {}: every MCP
// result is an object).
func EncodeResult(id ID, result any) ([]byte, error) {
	if result == nil {
		result = map[string]any{}
	}
	return encodeResponse(id, "result", result)
}

// EncodeError is the error response (the null id when id is zero); data,
// when not nil, carries the Airlock problem code as {"code": "<code>"}.
func EncodeError(id ID, code int, message string, data map[string]any) ([]byte, error) {
	e := map[string]any{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	return encodeResponse(id, "error", e)
}

// encodeResponse is a response whose member ("result" or "error") is
// value, written in one buffer.
func encodeResponse(id ID, member string, value any) ([]byte, error) {
	if id.IsZero() {
		id = NullID
	}
	e := encoder{buf: append(make([]byte, 0, 512), `{"jsonrpc":"2.0","id":`...)}
	e.buf = append(e.buf, id.raw...)
	e.buf = append(append(append(e.buf, `,"`...), member...), `":`...)
	if err := e.value(value, 0); err != nil {
		return nil, err
	}
	return append(e.buf, '}'), nil
}
