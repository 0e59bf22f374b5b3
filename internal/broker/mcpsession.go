package broker

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"
)

// The MCP door's session ids (the session era's Mcp-Session-Id), which
// every replica reads alike (DESIGN §9): an id carries the protocol
// version the client agreed and when it was opened, under a MAC of the
// installation's key that binds it to the Airlock session and the upstream
// that opened it. No replica keeps a table of them; another session's id,
// or a forged one, is refused wherever it is shown.

// mcpSessionLife bounds a door session's life (the Airlock session's own
// lifetime is checked first, at admission).
const mcpSessionLife = 24 * time.Hour

// mcpSessionPrefix starts every door session id.
const mcpSessionPrefix = "mcs_"

// idEncoding writes and reads the id's parts.
var idEncoding = base64.RawURLEncoding.Strict()

// mcpSessionIDs makes and reads the door's session ids.
type mcpSessionIDs struct {
	key []byte
	now func() time.Time
}

// OpenMCPSession is a new door session id for Airlock session airlock on
// upstream, at protocol version.
func (b *Broker) OpenMCPSession(airlock, upstream, version string) string {
	return b.mcpIDs.open(airlock, upstream, version)
}

// MCPSession reads door session id for Airlock session airlock on
// upstream: the version it was opened at and when it expires; false when
// the id is not one this installation gave that session, or expired.
func (b *Broker) MCPSession(id, airlock, upstream string) (version string, expires time.Time, ok bool) {
	return b.mcpIDs.read(id, airlock, upstream)
}

func (m mcpSessionIDs) open(airlock, upstream, version string) string {
	payload := make([]byte, 8+12, 8+12+len(version))
	binary.BigEndian.PutUint64(payload, uint64(m.now().Unix()))
	_, _ = rand.Read(payload[8:20])
	payload = append(payload, version...)
	return mcpSessionPrefix + idEncoding.EncodeToString(payload) + "." + idEncoding.EncodeToString(m.mac(airlock, upstream, payload))
}

func (m mcpSessionIDs) read(id, airlock, upstream string) (string, time.Time, bool) {
	body, ok := strings.CutPrefix(id, mcpSessionPrefix)
	if !ok || len(id) > 256 {
		return "", time.Time{}, false
	}
	p, s, ok := strings.Cut(body, ".")
	if !ok {
		return "", time.Time{}, false
	}
	// Strict: an id has one spelling (the unused bits of the last
	// character are zero), so no other string reads as an id that was
	// given, or outlives its DELETE as a variant.
	payload, err1 := idEncoding.DecodeString(p)
	sum, err2 := idEncoding.DecodeString(s)
	if err1 != nil || err2 != nil || len(payload) < 20 || idEncoding.EncodeToString(payload) != p || idEncoding.EncodeToString(sum) != s ||
		!hmac.Equal(sum, m.mac(airlock, upstream, payload)) {
		return "", time.Time{}, false
	}
	expires := time.Unix(int64(binary.BigEndian.Uint64(payload)), 0).Add(mcpSessionLife)
	if !m.now().Before(expires) {
		return "", time.Time{}, false
	}
	return string(payload[20:]), expires, true
}

// mac binds payload to the Airlock session and the upstream.
func (m mcpSessionIDs) mac(airlock, upstream string, payload []byte) []byte {
	h := hmac.New(sha256.New, m.key)
	for _, part := range [][]byte{[]byte(airlock), []byte(upstream), payload} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)[:16]
}
