package mcp

import (
	"encoding/json"
	"errors"
	"strings"
)

// What the broker answers as the MCP server the sandbox talks to.

// Negotiate is the version the broker answers an initialize that asked for
// requested: the same when the broker speaks it (a session-era version),
// else the latest session-era version (the client then decides).
func Negotiate(requested string) string {
	if IsSupported(requested) && !Stateless(requested) {
		return requested
	}
	return V20251125
}

// DiscoverResult is the broker's answer to server/discover (2026-07-28):
// the versions it speaks, its capabilities, and its serverInfo in _meta.
func DiscoverResult(capabilities, serverInfo map[string]any) map[string]any {
	return map[string]any{
		"supportedVersions": append([]string(nil), Supported...),
		"capabilities":      capabilities,
		"_meta":             map[string]any{MetaServerInfo: serverInfo},
	}
}

// IsNotificationMethod reports whether method names a notification.
func IsNotificationMethod(method string) bool { return strings.HasPrefix(method, "notifications/") }

// ReservedCode reports whether code is one the SDKs read as their own
// transport's (a closed connection, a timeout: -32000 to -32005): never
// passed to a sandbox as a server's error.
func ReservedCode(code int) bool { return code >= -32005 && code <= -32000 }

// CancelledID is the id of the request a notifications/cancelled names,
// in the form ID.String gives.
func CancelledID(m *Message) (string, bool) {
	switch v := m.Params["requestId"].(type) {
	case string:
		return StringID(v).String(), true
	case json.Number:
		if isInteger(string(v)) {
			return string(v), true
		}
	}
	return "", false
}

// IsInputRequired reports whether err is a result's input_required.
func IsInputRequired(err error) bool { return errors.Is(err, ErrInputRequired) }

// ScrubValue is ScrubResult for any JSON value (an error's data).
func ScrubValue(v any, scrub func(string) string) (any, int) {
	out, n := ScrubResult(map[string]any{"v": v}, scrub)
	return out["v"], n
}
