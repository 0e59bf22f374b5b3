package httpapi

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// smallBody is the size under which an answer is scrubbed whole and sent
// with a Content-Length; larger ones stream.
const smallBody = 256 << 10

// beginCall starts a sandbox call on either proxy: its request id is
// answered in X-Airlock-Request-Id at once, so even a refusal carries it.
func (s *Server) beginCall(w http.ResponseWriter, r *http.Request) (*broker.Call, string) {
	name := chi.URLParam(r, "upstream")
	c := s.b.NewCall(name, r.Method)
	w.Header().Set("X-Airlock-Request-Id", c.RequestID())
	return c, name
}

// proxy is ANY /v1/proxy/{upstream}/{path...}: the REST door. It parses the
// request into the call pipeline (see broker.Call) and writes its answer.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	c, name := s.beginCall(w, r)
	failed := func(p Problem) { writeProblem(w, p, c.RequestID()) }
	deny := func(err error) { failed(s.refuse(r, c, err)) }

	tok, ok := bearer(r)
	if !ok {
		deny(errMissingToken)
		return
	}
	if err := c.Admit(broker.BearerCaller(tok, remoteAddr(r))); err != nil {
		deny(err)
		return
	}
	u, ok := s.b.Upstream(name)
	if !ok {
		deny(broker.ErrUnknownUpstream)
		return
	}
	rest, err := restPath(r, name)
	if err != nil {
		deny(err)
		return
	}
	wait, _ := preferWait(r)
	s.restCall(w, r, c, u, rest, wait)
}

// restCall is the REST pipeline of an admitted call, for the REST door and
// the proxy door: read the request canonically (rest is its escaped path
// on the upstream), authorize it, then hold it for a human (waiting up to
// wait for the decision) or forward it.
func (s *Server) restCall(w http.ResponseWriter, r *http.Request, c *broker.Call, u *upstream.Upstream, rest string, wait time.Duration) {
	failed := func(p Problem) { writeProblem(w, p, c.RequestID()) }
	deny := func(err error) { failed(s.refuse(r, c, err)) }
	req, err := readCall(w, r, rest, u.MaxBody, grants.PathOptions{AllowSemicolons: u.AllowPathSemicolons})
	if err != nil {
		deny(err)
		return
	}
	c.SetPath(grants.JoinPath(req.Segments), int64(len(req.Raw)))
	if req.WebSocket, err = upgradeRequest(r); err != nil {
		deny(err)
		return
	}
	if err := c.Authorize(req); err != nil {
		if req.WebSocket && errors.Is(err, grants.ErrNoMatchingGrant) {
			err = errWebSocketRule
		}
		deny(err)
		return
	}
	if req.WebSocket {
		if c.Gated() {
			// Grant validation keeps websocket rules ungated; should one be,
			// it is refused (Send gives the reservation back), never held.
			_, err := c.Send(r.Context())
			deny(errors.Join(errWebSocketGated, err))
			return
		}
		release, err := c.Stream() // a relay holds one of the session's stream slots
		if err != nil {
			deny(err)
			return
		}
		defer release()
		s.forwardWebSocket(w, r, c, u, deny, failed, release)
		return
	}
	if c.Gated() {
		s.hold(w, r, c, failed, wait)
		return
	}
	s.forward(w, r, c, deny, failed)
}

// refuse records a refused call (durably, with its code), logs and counts
// it, and returns the problem for the caller to write in its protocol.
func (s *Server) refuse(r *http.Request, c *broker.Call, err error) Problem {
	p := problemFor(err)
	rec := c.Record()
	if derr := c.Refuse(r.Context(), err, p.Code); derr != nil {
		s.log.Error("audit of a denied call failed", "request_id", rec.RequestID, "err", derr)
	}
	s.log.Info("call denied", "request_id", rec.RequestID, "session_id", c.SessionID(), "upstream", rec.Upstream, "method", rec.Method, "path", rec.Path, "code", p.Code)
	s.metrics.call(rec.Upstream, "deny", p.Code, c.Elapsed())
	return p
}

// forward sends an authorized call, for both proxies, and streams the
// scrubbed answer. deny refuses before anything was sent (no credential);
// failed writes an error the client's protocol understands.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, c *broker.Call, deny func(error), failed func(Problem)) {
	resp, ok := s.send(r, c, deny, failed)
	if !ok {
		return
	}
	s.answer(w, r, c, resp, failed)
}

// send sends an authorized call; on failure it answers (deny before
// anything was sent, failed after) and returns false.
func (s *Server) send(r *http.Request, c *broker.Call, deny func(error), failed func(Problem)) (*broker.Response, bool) {
	rec := c.Record()
	resp, err := c.Send(r.Context())
	switch {
	case err == nil:
		return resp, true
	case errors.Is(err, broker.ErrNoCredential), errors.Is(err, broker.ErrNotSent):
		deny(err)
	case errors.Is(err, broker.ErrNotRecorded):
		s.metrics.call(rec.Upstream, "deny", "audit_unavailable", c.Elapsed())
		s.log.Error("call refused: audit record not written", "request_id", rec.RequestID, "err", err)
		failed(problemFor(err))
	default:
		if r.Context().Err() != nil {
			c.Complete(0, 0, "client_gone")
			return nil, false
		}
		p := problemFor(err)
		c.Complete(0, 0, p.Code)
		s.metrics.call(rec.Upstream, "error", p.Code, c.Elapsed())
		failed(p)
	}
	return nil, false
}

// answer writes a sent call's answer, scrubbed, and records its outcome.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, c *broker.Call, resp *broker.Response, failed func(Problem)) {
	rec := c.Record()
	defer resp.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgrade nobody asked for (or that was not relayed): never
		// passed on as it is.
		p := problemFor(upstream.ErrUpstream)
		c.Complete(p.Status, 0, p.Code)
		s.metrics.call(rec.Upstream, "error", p.Code, c.Elapsed())
		failed(p)
		return
	}
	if streams(r, resp.Response) {
		release, err := c.Stream() // a streamed answer holds one of the session's stream slots
		if err != nil {
			// Sent, but its answer is not relayed: refused in the door's
			// protocol, the outcome recorded with the refusal's code.
			p := problemFor(err)
			c.Complete(p.Status, 0, p.Code)
			s.metrics.call(rec.Upstream, "deny", p.Code, c.Elapsed())
			s.log.Info("streamed answer refused", "request_id", rec.RequestID, "session_id", c.SessionID(), "upstream", rec.Upstream, "code", p.Code)
			failed(p)
			return
		}
		defer release()
	}
	h := w.Header()
	resp.CopyHeader(h)
	if vs := h["X-Airlock-Request-Id"]; len(vs) != 1 || vs[0] != rec.RequestID { // the upstream's own is not passed on
		h.Set("X-Airlock-Request-Id", rec.RequestID)
	}
	n, werr := writeBody(w, r, resp.Response, resp.Scrub)
	upDur := resp.UpstreamTime()
	s.metrics.upstream(rec.Upstream, upDur)
	if errors.Is(werr, errAnswerUnread) {
		// Nothing was sent yet: refuse in the door's protocol, without the
		// upstream's headers, and record what the client got.
		for k := range w.Header() {
			if k != "X-Airlock-Request-Id" {
				delete(w.Header(), k)
			}
		}
		p := problemFor(upstream.ErrUpstream)
		c.Complete(p.Status, 0, p.Code)
		s.metrics.call(rec.Upstream, "error", p.Code, c.Elapsed())
		failed(p)
		return
	}
	code := ""
	if werr != nil {
		code = "stream_interrupted"
		if cut := resp.Interrupted(); cut != nil {
			code = problemFor(cut).Code
		}
	}
	c.Complete(resp.StatusCode, n, code)
	s.metrics.call(rec.Upstream, "allow", "", c.Elapsed()-upDur)
	if s.log.Enabled(r.Context(), slog.LevelDebug) { // no argument boxing on the hot path otherwise
		s.log.Debug("call", "request_id", rec.RequestID, "session_id", c.SessionID(), "upstream", rec.Upstream, "method", rec.Method, "path", rec.Path, "status", resp.StatusCode, "bytes_out", n)
	}
	if errors.Is(werr, errStreamCut) {
		// The answer was cut off after its headers: end the connection without
		// the end of the body, so the client cannot take it for complete.
		panic(http.ErrAbortHandler)
	}
}

// streams reports whether writeBody streams the answer (a body larger
// than smallBody or of unknown length): long-lived work, counted against
// the session's max_streams_per_session.
func streams(r *http.Request, resp *http.Response) bool {
	if r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return false
	}
	return resp.ContentLength < 0 || resp.ContentLength > smallBody
}

// errAnswerUnread is a small answer that could not be read whole: nothing
// of it was sent, and the caller answers with an error instead.
var errAnswerUnread = errors.New("upstream answer could not be read")

// errStreamCut is a streamed answer that ended in an error after its
// headers were sent.
var errStreamCut = errors.New("streamed answer cut off")

// writeBody sends the scrubbed answer: whole with a Content-Length when
// small and of known length, streamed (flushed as it arrives) otherwise.
// Either way a read error sends nothing more of what was read: a small
// answer is not sent at all (errAnswerUnread), a streamed one stops where the scrubber had
// got to, never sending bytes it held back (errStreamCut).
func writeBody(w http.ResponseWriter, r *http.Request, resp *http.Response, scrub *upstream.Scrubber) (int64, error) {
	if r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		if cl := resp.Header.Get("Content-Length"); cl != "" && r.Method == http.MethodHead {
			w.Header().Set("Content-Length", cl) // the size of what GET would send
		}
		w.WriteHeader(resp.StatusCode)
		return 0, nil
	}
	if resp.ContentLength >= 0 && resp.ContentLength <= smallBody {
		body, err := readAnswer(resp.Body, resp.ContentLength)
		if err != nil {
			return 0, errors.Join(errAnswerUnread, err)
		}
		body = scrub.Bytes(body)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(resp.StatusCode)
		n, err := w.Write(body)
		return int64(n), err
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	src := scrub.Reader(resp.Body)
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, errors.Join(errStreamCut, werr)
			}
			total += int64(n)
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, errors.Join(errStreamCut, err)
		}
	}
}

// readAnswer reads a small answer of announced length n into one buffer
// of that size (no regrowing and copying as io.ReadAll does), at most n+1
// bytes as io.ReadAll(io.LimitReader(r, n+1)) would. n is at most
// smallBody: the buffer is bounded whatever the upstream announces.
func readAnswer(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, n+1)
	for len(buf) < cap(buf) {
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF { // as io.ReadAll: the end, not a wrapped error
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// proxyMethods are the methods a sandbox may use; others answer 405.
var proxyMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost,
	http.MethodPut, http.MethodPatch, http.MethodDelete,
}

// restPath is the escaped path of a /v1/proxy/{name}/... request after
// its prefix.
func restPath(r *http.Request, name string) (string, error) {
	escaped := r.URL.EscapedPath()
	prefix := "/v1/proxy/" + name
	if !strings.HasPrefix(escaped, prefix) {
		// The upstream name itself was escaped: not canonical.
		return "", errors.Join(grants.ErrBadRequest, errors.New("upstream name is not canonical"))
	}
	return escaped[len(prefix):], nil
}

// readCall canonicalizes the sandbox's request (DESIGN §4): path (the
// escaped path as the door received it, under the upstream's options),
// query, body (bounded before reading, JSON parsed strictly).
func readCall(w http.ResponseWriter, r *http.Request, rest string, maxBody int64, opts grants.PathOptions) (*broker.Request, error) {
	if rest == "" {
		rest = "/"
	}
	segs, err := grants.CanonicalPath(rest, opts)
	if err != nil {
		return nil, err
	}
	query, err := grants.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	gzipped, err := requestEncoding(r.Header)
	if err != nil {
		return nil, err
	}
	if r.ContentLength > maxBody {
		return nil, errBodyTooLarge
	}
	c := &broker.Request{Call: grants.Call{Method: r.Method, Segments: segs, Query: query, Header: r.Header}}
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, errBodyTooLarge
			}
			if errors.Is(err, errBodyStalled) {
				return nil, errBodyStalled
			}
			return nil, errors.Join(grants.ErrBadRequest, errors.New("could not read the request body"))
		}
		if gzipped {
			if body, err = gunzipBody(body, maxBody); err != nil {
				return nil, err
			}
		}
		c.Raw = body
	}
	if len(r.Header.Values("Content-Type")) > 1 {
		// One reader takes the first, another the last: which body is it?
		return nil, errors.Join(grants.ErrBadRequest, errors.New("Content-Type is given more than once"))
	}
	if len(c.Raw) > 0 {
		c.HasBody = true
		if ct := r.Header.Get("Content-Type"); isJSON(ct) {
			if !utf8Charset(ct) {
				// The broker reads JSON as UTF-8; an upstream honouring another
				// charset would read other keys and values.
				return nil, errors.Join(grants.ErrBadRequest, errors.New("a JSON body must be UTF-8 (no other charset)"))
			}
			v, err := grants.ParseJSON(c.Raw)
			if err != nil {
				return nil, err
			}
			c.Body, c.BodyJSON = v, true
		}
	}
	return c, nil
}

// requestEncoding reads the request body's Content-Encoding: none or
// identity, or gzip (git compresses larger fetch negotiations), which the
// broker decodes so that it checks, and sends, the plain body. Anything
// else, a list of codings or the header given twice is refused: the
// broker would not know what the upstream reads.
func requestEncoding(h http.Header) (gzipped bool, err error) {
	vs := h.Values("Content-Encoding")
	if len(vs) == 0 {
		return false, nil
	}
	if len(vs) == 1 {
		switch enc := strings.ToLower(strings.TrimSpace(vs[0])); enc {
		case "identity":
			h.Del("Content-Encoding")
			return false, nil
		case "gzip", "x-gzip":
			h.Del("Content-Encoding") // the body goes on decoded
			return true, nil
		}
	}
	return false, errors.Join(grants.ErrBadRequest, errors.New("a request body may only be gzip-encoded (one Content-Encoding)"))
}

// gunzipBody decodes a gzip request body, at most limit bytes decoded (a
// small body must not inflate past the upstream's max_body).
func gunzipBody(body []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, errors.Join(grants.ErrBadRequest, errors.New("the gzip request body does not decode"))
	}
	plain, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, errors.Join(grants.ErrBadRequest, errors.New("the gzip request body does not decode"))
	}
	if int64(len(plain)) > limit {
		return nil, errBodyTooLarge
	}
	return plain, nil
}

func isJSON(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// utf8Charset reports whether a media type names no charset or UTF-8.
func utf8Charset(ct string) bool {
	_, params, err := mime.ParseMediaType(ct)
	cs, ok := params["charset"]
	return err == nil && (!ok || strings.EqualFold(cs, "utf-8") || strings.EqualFold(cs, "utf8"))
}
