package httpapi

import (
	"context"
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

// beginCall starts a sandbox call on either proxy: its clock, its request
// id (answered in X-Airlock-Request-Id at once, so even a refusal carries
// it), the upstream named in the route, and its audit record.
func beginCall(w http.ResponseWriter, r *http.Request) (time.Time, string, broker.CallRecord) {
	start := time.Now()
	reqID := broker.NewRequestID()
	w.Header().Set("X-Airlock-Request-Id", reqID)
	name := chi.URLParam(r, "upstream")
	return start, name, broker.CallRecord{RequestID: reqID, Upstream: truncate(name, 64), Method: truncate(r.Method, 16)}
}

// proxy is ANY /v1/proxy/{upstream}/{path...}: verify, canonicalize,
// decide, record durably, inject, forward, scrub, record the outcome.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	start, name, rec := beginCall(w, r)
	reqID := rec.RequestID

	deny := func(l *broker.Live, err error) { writeProblem(w, s.refuse(r, l, &rec, start, err), reqID) }

	tok, ok := bearer(r)
	if !ok {
		deny(nil, errMissingToken)
		return
	}
	l, err := s.b.Check(tok, remoteAddr(r))
	if err != nil {
		deny(l, err)
		return
	}
	u, ok := s.b.Upstream(name)
	if !ok {
		deny(l, broker.ErrUnknownUpstream)
		return
	}
	call, err := readCall(w, r, name, u.MaxBody, grants.PathOptions{AllowSemicolons: u.AllowPathSemicolons})
	if err != nil {
		deny(l, err)
		return
	}
	rec.Path = grants.JoinPath(call.Segments)
	rec.BytesIn = int64(len(call.raw))
	d, err := s.b.Decide(l, name, &call.Call)
	if err != nil {
		deny(l, err)
		return
	}
	out, err := outbound(r, u, call, d)
	if err != nil {
		d.Release()
		deny(l, err)
		return
	}
	if s.b.Gated(l, d) {
		s.hold(w, r, l, d, out, rec, start, func(p Problem) { writeProblem(w, p, reqID) })
		return
	}
	s.forward(w, r, l, d, u, out, rec, start, deny, func(p Problem) { writeProblem(w, p, reqID) })
}

// refuse records a refused call (durably, with its code), logs and counts
// it, and returns the problem for the caller to write in its protocol.
func (s *Server) refuse(r *http.Request, l *broker.Live, rec *broker.CallRecord, start time.Time, err error) Problem {
	p := problemFor(err)
	if derr := s.b.RecordDenied(r.Context(), l, *rec, p.Code, err); derr != nil {
		s.log.Error("audit of a denied call failed", "request_id", rec.RequestID, "err", derr)
	}
	sid := ""
	if l != nil {
		sid = l.Session.ID
	}
	s.log.Info("call denied", "request_id", rec.RequestID, "session_id", sid, "upstream", rec.Upstream, "method", rec.Method, "path", rec.Path, "code", p.Code)
	s.metrics.call(rec.Upstream, "deny", p.Code, time.Since(start))
	return p
}

// forward performs an allowed call, for both proxies: it fails closed
// without the credential or the durable record, sends the request (cut off
// by the upstream timeout or a kill of the session), streams the scrubbed
// answer and records the outcome. deny refuses before anything was sent;
// failed writes an error the client's protocol understands.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, l *broker.Live, d *grants.Decision, u *upstream.Upstream,
	out *upstream.Outbound, rec broker.CallRecord, start time.Time, deny func(*broker.Live, error), failed func(Problem)) {
	bound, stop := s.b.Bound(r.Context(), l)
	defer stop()
	ctx, cancel := context.WithTimeout(bound, u.Timeout)
	defer cancel()
	cred, err := u.Credential(ctx)
	if err != nil {
		d.Release()
		s.b.CredentialFailed(u.Name)
		deny(l, err)
		return
	}
	if err := s.b.RecordAllowed(r.Context(), l, d, rec); err != nil {
		s.metrics.call(rec.Upstream, "deny", "audit_unavailable", time.Since(start))
		s.log.Error("call refused: audit record not written", "request_id", rec.RequestID, "err", err)
		failed(problemFor(err))
		return
	}
	upStart := time.Now()
	resp, err := u.Do(ctx, out, cred)
	if err != nil {
		if cut := broker.Interrupted(bound); cut != nil {
			err = cut
		}
		if r.Context().Err() != nil {
			s.b.RecordCompleted(l, d, rec, 0, time.Since(start).Microseconds(), 0, "client_gone")
			return
		}
		p := problemFor(err)
		s.b.RecordCompleted(l, d, rec, 0, time.Since(start).Microseconds(), 0, p.Code)
		s.metrics.call(rec.Upstream, "error", p.Code, time.Since(start))
		failed(p)
		return
	}
	defer resp.Body.Close()
	upstream.ResponseHeader(w.Header(), resp.Header, cred.Scrub)
	w.Header().Set("X-Airlock-Request-Id", rec.RequestID)
	n, werr := writeBody(w, r, resp, cred.Scrub)
	upDur := time.Since(upStart)
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
		s.b.RecordCompleted(l, d, rec, p.Status, time.Since(start).Microseconds(), 0, p.Code)
		s.metrics.call(rec.Upstream, "error", p.Code, time.Since(start))
		failed(p)
		return
	}
	code := ""
	if werr != nil {
		code = "stream_interrupted"
		if cut := broker.Interrupted(bound); cut != nil {
			code = problemFor(cut).Code
		}
	}
	s.b.RecordCompleted(l, d, rec, resp.StatusCode, time.Since(start).Microseconds(), n, code)
	s.metrics.call(rec.Upstream, "allow", "", time.Since(start)-upDur)
	if s.log.Enabled(r.Context(), slog.LevelDebug) { // no argument boxing on the hot path otherwise
		s.log.Debug("call", "request_id", rec.RequestID, "session_id", l.Session.ID, "upstream", rec.Upstream, "method", rec.Method, "path", rec.Path, "status", resp.StatusCode, "bytes_out", n)
	}
	if errors.Is(werr, errStreamCut) {
		// The answer was cut off after its headers: end the connection without
		// the end of the body, so the client cannot take it for complete.
		panic(http.ErrAbortHandler)
	}
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
		body, err := io.ReadAll(io.LimitReader(resp.Body, resp.ContentLength+1))
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

type sandboxCall struct {
	grants.Call
	raw []byte
}

// proxyMethods are the methods a sandbox may use; others answer 405.
var proxyMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost,
	http.MethodPut, http.MethodPatch, http.MethodDelete,
}

// readCall canonicalizes the sandbox's request (DESIGN §4): path (under
// the upstream's options), query, body (bounded before reading, JSON parsed
// strictly).
func readCall(w http.ResponseWriter, r *http.Request, name string, maxBody int64, opts grants.PathOptions) (*sandboxCall, error) {
	escaped := r.URL.EscapedPath()
	prefix := "/v1/proxy/" + name
	if !strings.HasPrefix(escaped, prefix) {
		// The upstream name itself was escaped: not canonical.
		return nil, errors.Join(grants.ErrBadRequest, errors.New("upstream name is not canonical"))
	}
	rest := escaped[len(prefix):]
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
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, errors.Join(grants.ErrBadRequest, errors.New("encoded request bodies are not accepted"))
	}
	if r.ContentLength > maxBody {
		return nil, errBodyTooLarge
	}
	c := &sandboxCall{Call: grants.Call{Method: r.Method, Segments: segs, Query: query, Header: r.Header}}
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, errBodyTooLarge
			}
			return nil, errors.Join(grants.ErrBadRequest, errors.New("could not read the request body"))
		}
		c.raw = body
	}
	if len(r.Header.Values("Content-Type")) > 1 {
		// One reader takes the first, another the last: which body is it?
		return nil, errors.Join(grants.ErrBadRequest, errors.New("Content-Type is given more than once"))
	}
	if len(c.raw) > 0 {
		c.HasBody = true
		if ct := r.Header.Get("Content-Type"); isJSON(ct) {
			if !utf8Charset(ct) {
				// The broker reads JSON as UTF-8; an upstream honouring another
				// charset would read other keys and values.
				return nil, errors.Join(grants.ErrBadRequest, errors.New("a JSON body must be UTF-8 (no other charset)"))
			}
			v, err := grants.ParseJSON(c.raw)
			if err != nil {
				return nil, err
			}
			c.Body, c.BodyJSON = v, true
		}
	}
	return c, nil
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

// outbound builds the request to send from what was checked: canonical
// path, re-encoded query, allowlisted headers plus the rule's checked or
// pinned ones, and the checked (or re-serialized) body.
func outbound(r *http.Request, u *upstream.Upstream, c *sandboxCall, d *grants.Decision) (*upstream.Outbound, error) {
	h := make(http.Header, len(u.ForwardHeaders)+len(d.Header))
	for name := range u.ForwardHeaders {
		if vs, ok := r.Header[name]; ok {
			h[name] = vs
		}
	}
	for name, vs := range d.Header {
		h[name] = vs
	}
	query := d.Query
	if u.Inject.Query != "" {
		// The sandbox cannot supply (or shadow) the credential parameter, under
		// any key an upstream could read as its name (API_KEY, api_key[], api.key).
		kept := query[:0:0]
		for _, p := range query {
			if !grants.QueryKeyReaches(p.Key, u.Inject.Query) {
				kept = append(kept, p)
			}
		}
		query = kept
	}
	out := &upstream.Outbound{Method: c.Method, Path: grants.JoinPath(c.Segments), Query: grants.EncodeQuery(query), Header: h}
	switch {
	case d.BodyChanged:
		b, err := d.BodyBytes(c.raw)
		if err != nil {
			return nil, err
		}
		out.Body = b
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
	case c.HasBody:
		out.Body = c.raw
	}
	return out, nil
}
