package httpapi

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// WebSocket upgrades (RFC 6455), for the REST door and the proxy door
// alike (readREST): a GET carrying Upgrade: websocket passes only where a
// rule says websocket: true; any other upgrade is refused. The handshake
// goes through the pipeline as any call (admit, authorize, the durable
// "allowed" record, the credential injected); on 101 the client's
// connection is taken over and the two are relayed until either side
// closes or the call's standing ends (Relay.Done: the session's kill
// or expiry, its grant's revocation or expiry, the kill-switch): then the
// sandbox gets a close frame (1008, the reason the problem code that
// says why) and both connections close. Frames from the upstream are parsed and their
// payloads scrubbed (one scrubber stream per message, so a secret split
// across continuation frames is found), then re-framed; the sandbox's
// frames go to the upstream as they are (masked).

var (
	errUpgrade          = fmt.Errorf("%w: protocol upgrades other than WebSocket (h2c, ...) are not supported", grants.ErrBadRequest)
	errWebSocketRequest = fmt.Errorf("%w: a WebSocket upgrade is a GET without a body, with Connection: upgrade, Sec-WebSocket-Version: 13 and one Sec-WebSocket-Key", grants.ErrBadRequest)
)

// upgradeRequest reports whether r asks for a WebSocket upgrade (checked:
// RFC 6455 §4.1), and refuses any other upgrade.
func upgradeRequest(r *http.Request) (bool, error) {
	ups := r.Header.Values("Upgrade")
	if len(ups) == 0 && !headerHasToken(r.Header, "Connection", "upgrade") {
		return false, nil
	}
	if len(ups) != 1 || !strings.EqualFold(strings.TrimSpace(ups[0]), "websocket") {
		return false, errUpgrade
	}
	keys := r.Header.Values("Sec-Websocket-Key")
	if r.Method != http.MethodGet || r.ProtoMajor != 1 || r.ContentLength != 0 ||
		!headerHasToken(r.Header, "Connection", "upgrade") || len(keys) != 1 ||
		len(r.Header.Values("Sec-Websocket-Version")) != 1 || r.Header.Get("Sec-Websocket-Version") != "13" {
		return false, errWebSocketRequest
	}
	if k, err := base64.StdEncoding.DecodeString(keys[0]); err != nil || len(k) != 16 {
		return false, errWebSocketRequest
	}
	return true, nil
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// errNoHijack is a sandbox connection the relay cannot take over.
var errNoHijack = fault.Because(upstream.ErrUpstream, "the sandbox's connection cannot carry a WebSocket relay", nil)

// relayWebSocket relays an upgraded WebSocket (the pipeline's Answer):
// the handshake's answer to the sandbox, then frames both ways until either
// side ends or the call's standing does. It says what it relayed.
func relayWebSocket(w http.ResponseWriter, a *broker.Answer) broker.Written {
	h := http.Header{}
	a.CopyHeader(h)
	reqID := h.Get("X-Airlock-Request-Id")
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeProblem(w, problemFor(errNoHijack), reqID)
		return broker.Written{Status: fault.UpstreamError.Status(), Code: fault.UpstreamError.Code(), Err: errNoHijack}
	}
	_ = conn.SetDeadline(time.Time{}) // the server's deadlines do not apply to the relay
	var hs strings.Builder
	hs.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	for _, name := range []string{"Sec-Websocket-Accept", "Sec-Websocket-Protocol"} {
		if v := h.Get(name); v != "" {
			hs.WriteString(name + ": " + v + "\r\n")
		}
	}
	hs.WriteString("X-Airlock-Request-Id: " + reqID + "\r\n\r\n")
	if _, err := io.WriteString(conn, hs.String()); err != nil {
		conn.Close()
		return broker.Written{Code: "client_gone"}
	}
	relay := &wsRelay{client: conn, up: a.Relay.Conn, scrub: a.Relay.Scrub, max: a.Relay.MaxMessage}
	code := relay.run(brw.Reader, a.Relay.Done, a.Relay.Cut)
	return broker.Written{Bytes: relay.out.Load(), BytesIn: relay.in.Load(), Code: code}
}

// wsRelay relays one upgraded connection.
type wsRelay struct {
	client net.Conn
	up     io.ReadWriteCloser
	scrub  *upstream.Scrubber
	max    int64 // the largest frame payload from the upstream

	in, out atomic.Int64 // bytes sandbox → upstream, upstream → sandbox

	mu     sync.Mutex // one frame to the sandbox at a time
	closed bool       // the relay's own close frame went out: nothing more does
}

// run relays until either side ends or done closes, then closes both
// connections; it returns the outcome's code ("" for an ordinary end).
// When done closes, the sandbox is first sent a close frame whose reason is
// why() (a problem code), and no frame after it.
func (w *wsRelay) run(clientIn *bufio.Reader, done <-chan struct{}, why func() string) string {
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			w.client.Close()
			w.up.Close()
		})
	}
	ended, upDone := make(chan struct{}), make(chan struct{})
	go func() { // sandbox → upstream, as it is
		defer close(upDone)
		defer closeAll()
		buf := make([]byte, 32<<10)
		for {
			n, err := clientIn.Read(buf)
			if n > 0 {
				if _, werr := w.up.Write(buf[:n]); werr != nil {
					return
				}
				w.in.Add(int64(n))
			}
			if err != nil {
				return
			}
		}
	}()
	var code string
	go func() { // upstream → sandbox, frame by frame, scrubbed
		defer close(ended)
		defer closeAll()
		code = w.downstream()
	}()
	select {
	case <-ended:
	case <-done:
		w.closeWith(wsPolicyViolation, why())
		closeAll()
		<-ended
	}
	<-upDone
	return code
}

// WebSocket opcodes and close codes (RFC 6455 §5.2, §7.4.1).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8

	wsProtocolError   = 1002
	wsPolicyViolation = 1008 // the relay's standing ended (RFC 6455 §7.4.1)
	wsTooBig          = 1009
)

// downstream reads the upstream's frames and writes them to the sandbox
// scrubbed and re-framed. A frame larger than max, a masked or reserved
// bit frame, or a broken fragment sequence ends the relay, the sandbox
// told why in a close frame.
func (w *wsRelay) downstream() string {
	r := bufio.NewReaderSize(w.up, 32<<10)
	var (
		hdr     [14]byte
		payload []byte
		out     []byte
		scratch []byte
		msg     *upstream.ScrubStream // the message in progress, or nil
		stream  = w.scrub.Stream()
	)
	fail := func(status uint16, code string) string {
		var p [2]byte
		binary.BigEndian.PutUint16(p[:], status)
		w.write(appendFrame(out[:0], true, wsClose, p[:]))
		return code
	}
	for {
		if _, err := io.ReadFull(r, hdr[:2]); err != nil {
			return ""
		}
		fin, rsv, op := hdr[0]&0x80 != 0, hdr[0]&0x70, hdr[0]&0x0f
		masked, n7 := hdr[1]&0x80 != 0, int64(hdr[1]&0x7f)
		if rsv != 0 || masked {
			return fail(wsProtocolError, "websocket_protocol_error")
		}
		size := n7
		switch n7 {
		case 126:
			if _, err := io.ReadFull(r, hdr[2:4]); err != nil {
				return ""
			}
			size = int64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			if _, err := io.ReadFull(r, hdr[2:10]); err != nil {
				return ""
			}
			v := binary.BigEndian.Uint64(hdr[2:10])
			if v > 1<<62 {
				return fail(wsTooBig, "websocket_frame_too_large")
			}
			size = int64(v)
		}
		control := op >= 0x8
		if control && (!fin || size > 125) {
			return fail(wsProtocolError, "websocket_protocol_error")
		}
		if size > w.max {
			return fail(wsTooBig, "websocket_frame_too_large")
		}
		if int64(cap(payload)) < size {
			payload = make([]byte, size)
		}
		payload = payload[:size]
		if _, err := io.ReadFull(r, payload); err != nil {
			return ""
		}
		var body []byte
		switch {
		case control:
			body = w.scrub.Bytes(payload)
			if len(body) > 125 {
				body = body[:125]
			}
		case op == wsText || op == wsBinary:
			if msg != nil {
				return fail(wsProtocolError, "websocket_protocol_error")
			}
			msg = stream
			body = msg.Append(scratch[:0], payload, fin)
		case op == wsContinuation:
			if msg == nil {
				return fail(wsProtocolError, "websocket_protocol_error")
			}
			body = msg.Append(scratch[:0], payload, fin)
		default:
			return fail(wsProtocolError, "websocket_protocol_error")
		}
		if !control {
			scratch = body
			if fin {
				msg = nil
			}
		}
		out = appendFrame(out[:0], fin, op, body)
		if !w.write(out) {
			return "client_gone"
		}
		if op == wsClose {
			return ""
		}
	}
}

// write sends b to the sandbox, counting it; nothing goes after the
// relay's own close frame.
func (w *wsRelay) write(b []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	n, err := w.client.Write(b)
	w.out.Add(int64(n))
	return err == nil
}

// closeWith sends the sandbox a close frame (status, reason: at most 123
// bytes) and no frame after it. A sandbox that does not read is not waited
// for beyond a second.
func (w *wsRelay) closeWith(status uint16, reason string) {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), status)
	p = append(p, reason...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	_ = w.client.SetWriteDeadline(time.Now().Add(time.Second))
	n, _ := w.client.Write(appendFrame(nil, true, wsClose, p))
	w.out.Add(int64(n))
}

// appendFrame appends an unmasked frame (a server's) to dst.
func appendFrame(dst []byte, fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	switch n := len(payload); {
	case n <= 125:
		dst = append(dst, b0, byte(n))
	case n <= 0xffff:
		dst = append(dst, b0, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, 127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, payload...)
}
