// Package ids makes the broker's identifiers: a prefix naming the kind
// (ses_, grt_, act_, tok_, ...), then 48 bits of milliseconds and 64 random
// bits in hex, so ids sort by creation time and cannot be guessed.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// New makes an identifier of the kind prefix, created at now.
func New(prefix string, now time.Time) string {
	var b [14]byte
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli()))
	copy(b[:6], ms[2:])
	_, _ = rand.Read(b[6:])
	return prefix + hex.EncodeToString(b[:])
}
