package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// seal sets e.Hash from the rest of e and returns the stored encoding. Hash
// is the last field and omitted when empty, so the stored form is the hashed
// form with `,"hash":"<hex>"` before its closing brace: one encoding, not two.
func seal(e *Event) ([]byte, error) {
	if y := e.Time.Year(); y < 0 || y > 9999 {
		return nil, errors.New("audit: event time outside years 0-9999")
	}
	if _, off := e.Time.Zone(); off <= -24*3600 || off >= 24*3600 {
		return nil, errors.New("audit: event time zone offset outside ±24h")
	}
	e.Hash = ""
	out := appendEvent(make([]byte, 0, sealedSize(e)), e)
	sum := sha256.Sum256(out)
	out = append(out[:len(out)-1], `,"hash":"`...)
	out = hex.AppendEncode(out, sum[:])
	e.Hash = string(out[len(out)-2*sha256.Size:])
	return append(out, `"}`...), nil
}

// sealedSize is a close upper estimate of a sealed record's length, so the
// encoding is built in one allocation.
func sealedSize(e *Event) int {
	n := 300 + len(e.Type) + len(e.Actor.Kind) + len(e.Actor.ID) + len(e.RequestID) + len(e.SessionID) +
		len(e.TaskID) + len(e.GrantID) + len(e.ActionID) + len(e.TraceID) + len(e.SpanID) + len(e.Upstream) + len(e.Method) + len(e.Path) +
		len(e.Decision) + len(e.Code) + len(e.Reason) + len(e.PrevHash)
	return n + n/8 // room for escapes
}

// appendEvent appends e's JSON encoding, byte for byte what encoding/json
// produces for Event (field order as declared, omitempty, HTML-safe string
// escapes) once its strings are valid UTF-8: the hash chain is defined over
// that form, and records written before this encoder existed must keep
// verifying. FuzzEventEncoding holds the two equal.
func appendEvent(b []byte, e *Event) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"actor":{"kind":`...)
	b = appendString(b, e.Actor.Kind)
	b = appendOptString(b, `,"id":`, e.Actor.ID)
	b = append(b, '}')
	b = appendOptString(b, `,"request_id":`, e.RequestID)
	b = appendOptString(b, `,"session_id":`, e.SessionID)
	b = appendOptString(b, `,"task_id":`, e.TaskID)
	b = appendOptString(b, `,"grant_id":`, e.GrantID)
	b = appendOptString(b, `,"action_id":`, e.ActionID)
	b = appendOptString(b, `,"trace_id":`, e.TraceID)
	b = appendOptString(b, `,"span_id":`, e.SpanID)
	b = appendOptString(b, `,"upstream":`, e.Upstream)
	b = appendOptString(b, `,"method":`, e.Method)
	b = appendOptString(b, `,"path":`, e.Path)
	b = appendOptString(b, `,"decision":`, e.Decision)
	b = appendOptString(b, `,"code":`, e.Code)
	b = appendOptString(b, `,"reason":`, e.Reason)
	b = appendOptInt(b, `,"status":`, int64(e.Status))
	b = appendOptInt(b, `,"latency_us":`, e.LatencyUS)
	b = appendOptInt(b, `,"bytes_in":`, e.BytesIn)
	b = appendOptInt(b, `,"bytes_out":`, e.BytesOut)
	if e.MCP != nil {
		b = appendMCP(b, e.MCP)
	}
	b = append(b, `,"prev_hash":`...)
	b = appendString(b, e.PrevHash)
	b = appendOptString(b, `,"hash":`, e.Hash)
	return append(b, '}')
}

// appendMCP appends an MCP record part as encoding/json does (its strings
// made valid UTF-8 first, as appendString's are, so it re-encodes the same
// once decoded). It is off the hot path of every other call.
func appendMCP(b []byte, m *MCP) []byte {
	v := *m
	v.Tool, v.ArgsSHA256, v.Digest, v.Recorded, v.Request = textOf(v.Tool), textOf(v.ArgsSHA256), textOf(v.Digest), textOf(v.Recorded), textOf(v.Request)
	if v.Constrained != nil {
		c := make(map[string]string, len(v.Constrained))
		for k, x := range v.Constrained {
			c[textOf(k)] = textOf(x)
		}
		v.Constrained = c
	}
	for _, list := range []*[]string{&v.Shown, &v.Hidden} {
		if *list != nil {
			l := make([]string, len(*list))
			for i, x := range *list {
				l[i] = textOf(x)
			}
			*list = l
		}
	}
	j, err := json.Marshal(&v)
	if err != nil { // strings, numbers and maps of strings always encode
		panic("audit: encoding an MCP record: " + err.Error())
	}
	return append(append(b, `,"mcp":`...), j...)
}

// textOf is s with invalid UTF-8 replaced by U+FFFD (decoded, the record reads valid text either way).
func textOf(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func appendOptString(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, key...), v)
}

func appendOptInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string encoding with HTML escaping: ", \
// and control characters escaped, <, > and & as \u003c.., and U+2028/U+2029
// escaped. One difference: invalid UTF-8 becomes the replacement character
// itself, not encoding/json's "\ufffd" escape, which decodes to that
// character and so re-encodes differently: a record holding invalid UTF-8
// would never verify.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\uFFFD"...) // raw, unlike encoding/json: a decoded record re-encodes the same
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
