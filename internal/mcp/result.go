package mcp

import (
	"encoding/base64"
	"errors"
	"slices"
	"strconv"

	"github.com/airlock-broker/airlock/internal/fault"
)

// The result types of the stateless era (SEP-2322): a result with no
// resultType is complete.
const (
	ResultComplete      = "complete"
	ResultInputRequired = "input_required"
)

var (
	// ErrInputRequired is a result asking the client for input (a
	// server-to-client request of the stateless era): never relayed to the
	// sandbox, whose call fails with server_request_blocked (DESIGN §10).
	ErrInputRequired = errors.New("mcp: the upstream asked for client input (input_required)")
	// ErrUnknownResultType is a resultType the broker does not know: it
	// fails closed, as an upstream error.
	ErrUnknownResultType = fault.New(fault.UpstreamError, "the MCP server answered an unknown resultType")
)

// ResultType is a result's resultType: absent or "complete" is complete
// (no error); "input_required" is ErrInputRequired; anything else,
// including a non-string, is ErrUnknownResultType.
func ResultType(result map[string]any) (string, error) {
	v, ok := result["resultType"]
	if !ok {
		return ResultComplete, nil
	}
	switch s, _ := v.(string); s {
	case ResultComplete:
		return s, nil
	case ResultInputRequired:
		return s, ErrInputRequired
	default:
		return s, ErrUnknownResultType
	}
}

// IsError reports whether a CallToolResult says the tool failed
// ("isError": true).
func IsError(result map[string]any) bool {
	b, _ := result["isError"].(bool)
	return b
}

// ScrubResult is a deep copy of result (a CallToolResult, any other
// result, or a notification's params) with every string value and every
// object member name passed through scrub (the broker's secret redactor),
// and the number of strings scrub changed. A "data" or "blob" string (the
// base64 of image and audio content, of an embedded resource) is also
// decoded and scrub run over the decoded bytes; when that changes them the
// scrubbed bytes are re-encoded in its place. The encoded text is scrubbed
// as text in any case, so a value that is not base64, or a secret written
// in the base64 text itself, is not missed. Two member names that scrub
// to the same name are kept apart ("[REDACTED]", "[REDACTED] (2)").
func ScrubResult(result map[string]any, scrub func(string) string) (map[string]any, int) {
	s := scrubber{scrub: scrub}
	out, _ := s.value(result, "").(map[string]any)
	if out == nil && result != nil {
		out = map[string]any{}
	}
	return out, s.n
}

// ScrubOwned is ScrubResult for a result the caller owns and drops after
// (a message it just parsed): the same output, but objects and arrays
// are scrubbed in place where no member name changes, so a clean answer
// costs no copy. result must not be read after, nor shared.
func ScrubOwned(result map[string]any, scrub func(string) string) (map[string]any, int) {
	s := scrubber{scrub: scrub, owned: true}
	out, _ := s.value(result, "").(map[string]any)
	if out == nil && result != nil {
		out = map[string]any{}
	}
	return out, s.n
}

type scrubber struct {
	scrub func(string) string
	n     int
	owned bool // scrub in place where the shape stays (ScrubOwned)
}

// keysStay reports whether no member name of m changes when scrubbed.
func (s *scrubber) keysStay(m map[string]any) bool {
	for k := range m {
		if s.scrub(k) != k {
			return false
		}
	}
	return true
}

func (s *scrubber) value(v any, key string) any {
	switch v := v.(type) {
	case string:
		if key == "data" || key == "blob" {
			v = s.base64(v)
		}
		return s.text(v)
	case map[string]any:
		if v == nil {
			return v
		}
		if s.owned && s.keysStay(v) {
			for k, x := range v {
				v[k] = s.value(x, k)
			}
			return v
		}
		out := make(map[string]any, len(v))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // collisions resolve the same way every time
		for _, k := range keys {
			nk := s.text(k)
			for i := 2; ; i++ {
				if _, taken := out[nk]; !taken {
					break
				}
				nk = s.scrub(k) + " (" + strconv.Itoa(i) + ")"
			}
			out[nk] = s.value(v[k], k)
		}
		return out
	case []any:
		if v == nil {
			return v
		}
		if s.owned {
			for i, x := range v {
				v[i] = s.value(x, "")
			}
			return v
		}
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = s.value(x, "")
		}
		return out
	default:
		return v // numbers, booleans, null
	}
}

func (s *scrubber) text(v string) string {
	out := s.scrub(v)
	if out != v {
		s.n++
	}
	return out
}

// base64 scrubs the bytes v encodes (standard alphabet, padded or not;
// line breaks are skipped), re-encoding them when scrub changed them.
func (s *scrubber) base64(v string) string {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		raw, err := enc.DecodeString(v)
		if err != nil {
			continue
		}
		out := s.scrub(string(raw))
		if out == string(raw) {
			return v
		}
		s.n++
		return enc.EncodeToString([]byte(out))
	}
	return v
}
