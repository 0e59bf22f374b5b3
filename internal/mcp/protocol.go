// Package mcp is the broker's own MCP (Model Context Protocol) message
// layer: strict parsing of JSON-RPC messages from a hostile sandbox and an
// untrusted upstream, re-serialization of what was checked, RFC 8785 (JCS)
// digests of tools and arguments, the narrowing of a tool's input schema to
// what a grant allows, the scrubbing of results, and the Server-Sent Events
// of Streamable HTTP. It does no I/O of its own beyond the SSE reader and
// writer over an io.Reader and io.Writer, and knows nothing of sessions,
// grants or the broker: the MCP door wires it.
package mcp

import "slices"

// The protocol versions the broker speaks, as their MCP version strings.
const (
	// V20250618 is the first stateful era the broker serves: initialize,
	// Mcp-Session-Id.
	V20250618 = "2025-06-18"
	// V20251125 is the last stateful era.
	V20251125 = "2025-11-25"
	// V20260728 is the stateless era (SEP-2575): no initialize, the version
	// and capabilities in each request's _meta, Mcp-Method / Mcp-Name
	// headers.
	V20260728 = "2026-07-28"
)

// Supported lists the versions the broker speaks, newest first.
var Supported = []string{V20260728, V20251125, V20250618}

// IsSupported reports whether version is one the broker speaks.
func IsSupported(version string) bool { return slices.Contains(Supported, version) }

// Stateless reports whether version belongs to the stateless era
// (2026-07-28 and later: MCP version strings are dates, so they compare as
// strings).
func Stateless(version string) bool { return version >= V20260728 }

// The HTTP headers of Streamable HTTP, in Go's canonical form (the spec
// writes MCP-Protocol-Version; header names are case-insensitive and
// net/http canonicalizes them to this).
const (
	HeaderSessionID       = "Mcp-Session-Id"
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	HeaderMethod          = "Mcp-Method"
	HeaderName            = "Mcp-Name"
	HeaderLastEventID     = "Last-Event-Id"
)

// The _meta keys of the stateless era, as the go-sdk names them
// (mcp.MetaKey*), and progressToken, which every era carries in _meta.
const (
	MetaProgressToken      = "progressToken"
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// The JSON-RPC error codes the broker answers with. The broker never uses
// -32000 to -32005, which SDKs read as a closed connection.
const (
	// CodeParseError is JSON-RPC's parse error: the message is not JSON the
	// broker accepts (malformed, duplicate or case-fold-equal keys, too
	// deep).
	CodeParseError = -32700
	// CodeInvalidRequest is JSON-RPC's invalid request: JSON, but not a
	// JSON-RPC 2.0 message (a batch, a null id, a missing method).
	CodeInvalidRequest = -32600
	// CodeMethodNotFound is JSON-RPC's method not found.
	CodeMethodNotFound = -32601
	// CodeArgument is JSON-RPC's invalid params: the broker's answer to a
	// tool call whose arguments a grant refuses.
	CodeArgument = -32602
	// CodeInternal is JSON-RPC's internal error.
	CodeInternal = -32603
	// CodeRefused is the broker's answer to any other refusal (no matching
	// grant, tool changed, ...); error.data.code names which.
	CodeRefused = -32010
	// CodeHeaderMismatch is MCP's code for Mcp-Method / Mcp-Name headers
	// that do not match the body (mcp.CodeHeaderMismatch in the go-sdk).
	CodeHeaderMismatch = -32020
	// CodeUnsupportedProtocolVersion is MCP's code for a version the
	// server does not speak (SEP-2575).
	CodeUnsupportedProtocolVersion = -32022
)

// The methods the broker itself knows.
const (
	MethodInitialize       = "initialize"
	MethodInitialized      = "notifications/initialized"
	MethodPing             = "ping"
	MethodDiscover         = "server/discover"
	MethodToolsList        = "tools/list"
	MethodToolsCall        = "tools/call"
	MethodCancelled        = "notifications/cancelled"
	MethodProgress         = "notifications/progress"
	MethodToolsListChanged = "notifications/tools/list_changed"
)
