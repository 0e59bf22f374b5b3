package httpapi

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
)

// proxy is ANY /v1/proxy/{upstream}/{path...}: the REST door. It parses
// the request for the call pipeline (broker.Do) and writes its outcome.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "upstream")
	in := broker.Inbound{Upstream: name, Method: r.Method}
	if tok, ok := bearer(r); ok {
		in.Caller = broker.BearerCaller(tok, remoteAddr(r))
	} else {
		in.Refused = errMissingToken
	}
	in.Wait, _ = preferWait(r)
	in.Parse = func(a *broker.Admitted) (*broker.Request, error) {
		rest, err := restPath(r, name)
		if err != nil {
			return nil, err
		}
		return readREST(w, r, a, rest)
	}
	out := s.outcomes(w, r, writeProblemOf)
	s.b.Do(r.Context(), in, out.write)
	out.end()
}

// readREST reads an admitted REST call canonically (rest is its escaped
// path on the upstream), for the REST door and the proxy door.
func readREST(w http.ResponseWriter, r *http.Request, a *broker.Admitted, rest string) (*broker.Request, error) {
	u := a.Upstream()
	req, err := readCall(w, r, rest, u.MaxBody, grants.PathOptions{AllowSemicolons: u.AllowPathSemicolons})
	if err != nil {
		return nil, err
	}
	a.SetPath(grants.JoinPath(req.Segments), int64(len(req.Raw)))
	if req.WebSocket, err = upgradeRequest(r); err != nil {
		return nil, err
	}
	return req, nil
}

// writeProblemOf writes err as a problem document.
func writeProblemOf(w http.ResponseWriter, err error, requestID string) {
	writeProblem(w, problemFor(err), requestID)
}

// outcomeWriter writes a call's outcome (broker.Outcome) on an HTTP door:
// errors in the door's protocol, a pending action as 202, an approved
// action's stored answer, the upstream's answer as it came (streamed when
// it streams), a WebSocket relayed.
type outcomeWriter struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	problem func(w http.ResponseWriter, err error, requestID string) // the door's error writer
	cut     bool                                                     // a streamed answer broke off after its headers
}

// outcomes is the outcome writer for r: problem writes errors in the
// door's protocol.
func (s *Server) outcomes(w http.ResponseWriter, r *http.Request, problem func(http.ResponseWriter, error, string)) outcomeWriter {
	return outcomeWriter{s: s, w: w, r: r, problem: problem}
}

func (o *outcomeWriter) write(out *broker.Outcome) broker.Written {
	h := o.w.Header()
	h.Set("X-Airlock-Request-Id", out.RequestID)
	if out.Held && out.Wait > 0 {
		if _, asked := preferWait(o.r); asked { // the wait the call had, when the client asked for one
			h.Set("Preference-Applied", "wait="+strconv.Itoa(int(out.Wait/time.Second)))
		}
	}
	switch {
	case out.Err != nil:
		o.problem(o.w, out.Err, out.RequestID)
	case out.Action != nil:
		h.Set("Location", "/v1/actions/"+out.Action.ID)
		h.Set("X-Airlock-Action-Id", out.Action.ID) // the broker's pending answer: an upstream's 202 never carries it
		writeJSON(o.w, http.StatusAccepted, toActionJSON(*out.Action, false))
	case out.Result != nil:
		writeResult(o.w, out.Result)
	case out.Answer.Relay != nil:
		return relayWebSocket(o.w, out.Answer)
	default:
		return o.answer(out.Answer)
	}
	return broker.Written{}
}

// end ends the request: a streamed answer cut off after its headers ends
// the connection without the end of the body, so the client cannot take
// it for complete.
func (o *outcomeWriter) end() {
	if o.cut {
		panic(http.ErrAbortHandler)
	}
}

// answer writes an upstream's answer: whole, or streamed (flushed as it
// arrives). A stream that breaks off sends nothing more: the scrubber
// never lets out bytes it held back.
func (o *outcomeWriter) answer(a *broker.Answer) broker.Written {
	a.CopyHeader(o.w.Header())
	o.w.WriteHeader(a.Status)
	if a.Stream == nil {
		n, err := o.w.Write(a.Body)
		return broker.Written{Bytes: int64(n), Err: err}
	}
	rc := http.NewResponseController(o.w)
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := a.Stream.Read(buf)
		if n > 0 {
			if _, werr := o.w.Write(buf[:n]); werr != nil {
				o.cut = true
				return broker.Written{Bytes: total, Err: werr}
			}
			total += int64(n)
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return broker.Written{Bytes: total}
		}
		if err != nil {
			o.cut = true
			return broker.Written{Bytes: total, Err: err}
		}
	}
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
