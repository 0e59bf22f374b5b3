package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// errAWSSignature is a SigV4 request that does not verify.
var errAWSSignature = errors.New("the request signature does not match (check the session's aws_credentials)")

// awsProxy is ANY /v1/aws/{upstream}/...: the stock AWS SDK or CLI pointed
// at the broker (AWS_ENDPOINT_URL), signing with the session's
// aws_credentials. The caller is named by the signature's access key.
func (s *Server) awsProxy(w http.ResponseWriter, r *http.Request) {
	c, name := s.beginCall(w, r)
	u, _ := s.b.Upstream(name)
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/aws/"+name)
	if rest == "" {
		rest = "/"
	}
	s.serveAWS(w, r, c, u, rest, func(sig *upstream.SigV4) error {
		return c.Admit(broker.SigV4Caller(sig.AccessKey, remoteAddr(r)))
	})
}

// serveAWS drives one SigV4 request through the call pipeline (see
// broker.Call), whichever door it came in by: it verifies the signature
// against the request as the client sent and signed it (its Host and
// path), maps rest (the escaped path below the upstream, path-style for
// S3) to an action and resource, and hands it on; the pipeline checks the
// grant, re-signs with the real credentials for the configured endpoint
// and forwards. admit admits the call (or checks the admitted caller) once
// the signature is parsed. u may be nil (no such upstream). Refusals answer
// in the protocol the client speaks.
func (s *Server) serveAWS(w http.ResponseWriter, r *http.Request, c *broker.Call, u *upstream.Upstream, rest string, admit func(*upstream.SigV4) error) {
	reqID := c.RequestID()
	deny := func(err error) {
		p := s.refuse(r, c, err)
		writeAWSError(w, u, p, reqID, errors.Is(err, errAWSSignature) || errors.Is(err, upstream.ErrSignature))
	}
	if u == nil || u.AWS == nil {
		deny(broker.ErrUnknownUpstream)
		return
	}
	sig, err := upstream.ParseSigV4(r)
	if err != nil {
		deny(errors.Join(errAWSSignature, err))
		return
	}
	if err := admit(sig); err != nil {
		deny(err)
		return
	}
	body, payloadHash, err := readAWSBody(r, sig, c.AWSSecret(), u.MaxBody, u.AWS.S3())
	if err != nil {
		deny(err)
		return
	}
	if err := c.VerifySigV4(sig, r, payloadHash, u.AWS.S3()); err != nil {
		deny(errors.Join(errAWSSignature, err))
		return
	}
	decoded, err := url.PathUnescape(rest)
	if err != nil || !strings.HasPrefix(decoded, "/") || strings.ContainsRune(decoded, 0) {
		deny(grants.ErrBadRequest)
		return
	}
	c.SetPath(rest, int64(len(body)))
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		deny(grants.ErrBadRequest)
		return
	}
	params, err := grants.ParseQuery(r.URL.RawQuery)
	if err != nil {
		deny(err)
		return
	}
	var form url.Values
	if !u.AWS.S3() && len(body) > 0 && formBody(r.Header.Get("Content-Type")) {
		form, _ = url.ParseQuery(string(body)) // what parses is what a lenient upstream could read
	}
	op, err := u.AWS.Operation(upstream.AWSRequest{Method: r.Method, Path: decoded, Query: query, Header: r.Header, Form: form, Body: body})
	if err != nil {
		deny(err)
		return
	}
	if op.SendPath != "" {
		rest = op.SendPath // built from the checked bucket and key: the upstream reads what was checked
	}
	c.SetPath(rest, int64(len(body)))
	req := &broker.Request{Call: grants.Call{Method: r.Method, Action: op.Action, Resource: op.Resource, Query: params, Header: r.Header, HasBody: len(body) > 0},
		Raw: body, AWS: &broker.AWSRequest{Path: rest, RawQuery: r.URL.RawQuery, Also: op.Also}}
	if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
		if v, err := grants.ParseJSON(body); err == nil {
			req.Body, req.BodyJSON = v, true
		}
	}
	if err := c.Authorize(req); err != nil {
		deny(err)
		return
	}
	failed := func(p Problem) { writeAWSError(w, u, p, reqID, false) }
	if c.Gated() {
		// AWS clients cannot follow a 202: hold the call open for the decision.
		if r.Header.Get("Prefer") == "" {
			r.Header.Set("Prefer", "wait=60")
		}
		wait, _ := preferWait(r)
		s.hold(w, r, c, failed, wait)
		return
	}
	s.forward(w, r, c, deny, failed)
}

// formBody reports whether a body of this Content-Type may be read as a
// form by a query-protocol upstream: a form, or no (or an unparsable) type.
func formBody(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err != nil || mt == "application/x-www-form-urlencoded"
}

// readAWSBody reads and checks the body against its declared payload hash,
// decoding aws-chunked bodies (verifying chunk signatures when signed). It
// returns the body to forward and the hash the signature covers.
func readAWSBody(r *http.Request, sig *upstream.SigV4, secret string, limit int64, s3 bool) ([]byte, string, error) {
	if r.ContentLength > limit {
		return nil, "", errBodyTooLarge
	}
	switch sig.PayloadHash {
	case upstream.StreamingSigned, upstream.StreamingSignedTrailer, upstream.StreamingUnsignedTrailer:
		key := secret
		if sig.PayloadHash == upstream.StreamingUnsignedTrailer {
			key = ""
		}
		data, trailers, err := sig.DecodeChunked(r.Body, key, limit)
		if errors.Is(err, errBodyStalled) {
			return nil, "", errBodyStalled
		}
		if err != nil {
			return nil, "", errors.Join(errAWSSignature, err)
		}
		for k, vs := range trailers {
			if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") {
				r.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
		return data, sig.PayloadHash, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if errors.Is(err, errBodyStalled) {
		return nil, "", errBodyStalled
	}
	if err != nil {
		return nil, "", grants.ErrBadRequest
	}
	if int64(len(data)) > limit {
		return nil, "", errBodyTooLarge
	}
	sum := sha256.Sum256(data)
	actual := hex.EncodeToString(sum[:])
	switch sig.PayloadHash {
	case upstream.UnsignedPayload:
		return data, sig.PayloadHash, nil
	case "":
		if s3 {
			return nil, "", errors.Join(errAWSSignature, errors.New("S3 requests carry X-Amz-Content-Sha256"))
		}
		return data, actual, nil
	}
	if !strings.EqualFold(sig.PayloadHash, actual) {
		return nil, "", errors.Join(errAWSSignature, errors.New("the body does not match X-Amz-Content-Sha256"))
	}
	return data, sig.PayloadHash, nil
}

// writeAWSError answers in the client's protocol, so the SDK shows the
// Airlock code instead of failing to parse: S3's XML error, or a JSON error
// for JSON-protocol services.
func writeAWSError(w http.ResponseWriter, u *upstream.Upstream, p Problem, reqID string, signature bool) {
	code := map[int]string{400: "InvalidRequest", 401: "AccessDenied", 403: "AccessDenied", 404: "NoSuchUpstream", 405: "MethodNotAllowed",
		409: "Conflict", 413: "EntityTooLarge", 429: "SlowDown", 502: "InternalError", 503: "ServiceUnavailable", 504: "RequestTimeout"}[p.Status]
	if code == "" {
		code = "InternalError"
	}
	if p.Code == "too_many_pending" {
		code = "TooManyPendingActions" // not a throttling code: the SDK must not retry it on its own
	}
	if signature {
		code = "SignatureDoesNotMatch"
		p.Status, p.Code = http.StatusForbidden, "invalid_token"
	}
	msg := "airlock " + p.Code + ": " + p.Detail
	h := w.Header()
	h.Set("X-Airlock-Code", p.Code)
	h.Set("Cache-Control", "no-store")
	if u == nil || u.AWS == nil || u.AWS.S3() {
		var b bytes.Buffer
		b.WriteString(xml.Header)
		_ = xml.NewEncoder(&b).Encode(struct {
			XMLName   xml.Name `xml:"Error"`
			Code      string   `xml:"Code"`
			Message   string   `xml:"Message"`
			RequestID string   `xml:"RequestId"`
		}{Code: code, Message: msg, RequestID: reqID})
		h.Set("Content-Type", "application/xml")
		w.WriteHeader(p.Status)
		_, _ = w.Write(b.Bytes())
		return
	}
	if code == "AccessDenied" {
		code = "AccessDeniedException"
	}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-ErrorType", code)
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}
