package broker

import (
	"fmt"
	"sync"
)

// ErrTooManyStreams refuses a WebSocket relay or a streamed answer beyond
// the session's limit (max_streams_per_session): problem code rate_limited.
var ErrTooManyStreams = fmt.Errorf("%w: the session holds as many streams open as max_streams_per_session allows (WebSocket relays, streamed answers, MCP GET streams); close one", ErrRateLimited)

// Stream takes one of the session's stream slots for long-lived work on
// this call (a WebSocket relay, before Send; a streamed answer, once the
// answer turned out to stream): release gives it back when the work ends.
// Beyond the limit it returns ErrTooManyStreams; a call not sent yet is
// then ended, its reservation given back (the door refuses it), and a
// sent one's answer is not to be relayed (the door completes it with the
// refusal's code). Other sessions' slots are their own.
func (c *call) stream() (release func(), err error) {
	if c.l == nil {
		return nil, ErrOutOfOrder
	}
	if c.b.maxStream > 0 && !c.l.TakeStream(c.b.maxStream) {
		if c.step == stepCleared || c.step == stepAuthorized {
			c.unreserve()
			c.step = stepSent
		}
		return nil, ErrTooManyStreams
	}
	if c.b.maxStream <= 0 {
		return func() {}, nil
	}
	var once sync.Once
	return func() { once.Do(c.l.FreeStream) }, nil
}
