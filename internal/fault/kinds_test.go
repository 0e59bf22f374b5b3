package fault

import (
	"errors"
	"testing"
)

// TestMCPKinds: the MCP door's kinds answer their codes and statuses, are
// found by their stored codes, and take their places in precedence: a
// quarantined tool is a refusal (before an upstream's failure), a blocked
// server request an upstream failure of its own (before upstream_error).
func TestMCPKinds(t *testing.T) {
	for _, tt := range []struct {
		k      Kind
		code   string
		status int
	}{
		{ToolChanged, "tool_changed", 409},
		{ServerRequestBlocked, "server_request_blocked", 502},
	} {
		if tt.k.Code() != tt.code || tt.k.Status() != tt.status || KindOf(tt.code) != tt.k {
			t.Errorf("%v: code %s status %d, KindOf %v; want %s %d", tt.k, tt.k.Code(), tt.k.Status(), KindOf(tt.code), tt.code, tt.status)
		}
	}
	changed, blocked := New(ToolChanged, "tool changed"), New(ServerRequestBlocked, "blocked")
	for _, tt := range []struct {
		name string
		err  error
		want Kind
	}{
		{"tool changed over an upstream error", errors.Join(New(UpstreamError, "x"), changed), ToolChanged},
		{"a constraint over tool changed", errors.Join(changed, New(ConstraintViolated, "x")), ConstraintViolated},
		{"tool changed over forbidden", errors.Join(New(Forbidden, "x"), changed), ToolChanged},
		{"blocked over an upstream error", errors.Join(New(UpstreamError, "x"), blocked), ServerRequestBlocked},
		{"a timeout over blocked", errors.Join(blocked, New(UpstreamTimeout, "x")), UpstreamTimeout},
	} {
		if got := Of(tt.err); got != tt.want {
			t.Errorf("%s: Of = %v, want %v", tt.name, got, tt.want)
		}
	}
}
