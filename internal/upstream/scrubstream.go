package upstream

// ScrubStream scrubs one message that arrives in pieces (a WebSocket
// message split across continuation frames): a secret split between two
// pieces is still found. It holds back, between pieces, only as many bytes
// as the longest form could straddle. A stream of a scrubber that follows a
// Secrets scrubs each piece with the set as it is then, so a secret added
// while a relay runs is scrubbed from its later pieces. Not safe for
// concurrent use.
type ScrubStream struct {
	s       *Scrubber
	held    []byte // received, not yet scanned
	covered int    // bytes at the start of held inside a redaction already written
}

// Stream starts a scrubber stream for one message.
func (s *Scrubber) Stream() *ScrubStream { return &ScrubStream{s: s} }

// Append appends to dst what of p (the message's next piece) can be passed
// on scrubbed, keeping back what could be the beginning of a secret. With
// final (the message's last piece) it appends everything and the stream is
// ready for the next message.
func (st *ScrubStream) Append(dst, p []byte, final bool) []byte {
	sn := st.s.snap()
	if len(sn.parts) == 0 && len(st.held) == 0 {
		st.covered = 0
		return append(dst, p...)
	}
	st.held = append(st.held, p...)
	safe := len(st.held) - (sn.maxLen - 1)
	if final {
		safe = len(st.held)
	}
	if safe <= 0 {
		return dst
	}
	dst, st.covered = sn.scan(dst, st.held, safe, st.covered)
	st.held = append(st.held[:0], st.held[safe:]...)
	if final {
		st.held, st.covered = st.held[:0], 0
	}
	return dst
}
