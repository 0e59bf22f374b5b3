package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// clockSkew bounds how far a SigV4 request's time may be from the broker's.
const clockSkew = 15 * time.Minute

// errAWSSignature is a SigV4 request that does not verify.
var errAWSSignature = errors.New("the request signature does not match (check the session's aws_credentials)")

// awsProxy is ANY /v1/aws/{upstream}/...: the stock AWS SDK or CLI pointed
// at the broker (AWS_ENDPOINT_URL), signing with the session's
// aws_credentials. The broker verifies that signature, maps the request to
// an action and resource, checks the grant, re-signs with the real
// credentials and forwards. Refusals answer in the protocol the client speaks.
func (s *Server) awsProxy(w http.ResponseWriter, r *http.Request) {
	start, name, rec := beginCall(w, r)
	reqID := rec.RequestID
	u, ok := s.b.Upstream(name)
	deny := func(l *broker.Live, err error) {
		p := s.refuse(r, l, &rec, start, err)
		writeAWSError(w, u, p, reqID, errors.Is(err, errAWSSignature) || errors.Is(err, upstream.ErrSignature))
	}
	if !ok || u.AWS == nil {
		deny(nil, broker.ErrUnknownUpstream)
		return
	}
	sig, err := upstream.ParseSigV4(r)
	if err != nil {
		deny(nil, errors.Join(errAWSSignature, err))
		return
	}
	l, err := s.b.CheckAWS(sig.AccessKey, remoteAddr(r))
	if err != nil {
		deny(l, err)
		return
	}
	body, payloadHash, err := readAWSBody(r, sig, s.b.AWSSecret(l.Session.ID), u.MaxBody, u.AWS.S3())
	if err != nil {
		deny(l, err)
		return
	}
	if err := sig.Verify(r, s.b.AWSSecret(l.Session.ID), payloadHash, s.b.Now(), clockSkew, u.AWS.S3()); err != nil {
		deny(l, errors.Join(errAWSSignature, err))
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/aws/"+name)
	if rest == "" {
		rest = "/"
	}
	decoded, err := url.PathUnescape(rest)
	if err != nil || !strings.HasPrefix(decoded, "/") || strings.ContainsRune(decoded, 0) {
		deny(l, grants.ErrBadRequest)
		return
	}
	rec.Path, rec.BytesIn = rest, int64(len(body))
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		deny(l, grants.ErrBadRequest)
		return
	}
	params, err := grants.ParseQuery(r.URL.RawQuery)
	if err != nil {
		deny(l, err)
		return
	}
	var form url.Values
	if !u.AWS.S3() && len(body) > 0 && formBody(r.Header.Get("Content-Type")) {
		form, _ = url.ParseQuery(string(body)) // what parses is what a lenient upstream could read
	}
	op, err := u.AWS.Operation(upstream.AWSRequest{Method: r.Method, Path: decoded, Query: query, Header: r.Header, Form: form, Body: body})
	if err != nil {
		deny(l, err)
		return
	}
	if op.SendPath != "" {
		rest = op.SendPath // built from the checked bucket and key: the upstream reads what was checked
	}
	rec.Path = rest
	call := &grants.Call{Method: r.Method, Action: op.Action, Resource: op.Resource, Query: params, Header: r.Header, HasBody: len(body) > 0}
	if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
		if v, err := grants.ParseJSON(body); err == nil {
			call.Body, call.BodyJSON = v, true
		}
	}
	d, err := s.b.Decide(l, name, call)
	if err != nil {
		deny(l, err)
		return
	}
	out := &upstream.Outbound{Method: r.Method, Path: rest, Query: r.URL.RawQuery, Header: awsForwardHeaders(r.Header, d.Header), Body: body}
	if len(d.Filled) > 0 {
		out.Query = grants.EncodeQuery(d.Query)
	}
	// Further permissions the request needs (a copy's source, headers that
	// set an ACL, a lock, tags), checked on the request as it will be sent.
	// They reserve no use (the call is one call), but an exhausted grant
	// permits nothing and a permitting rule gates the call as its own would.
	var permits []*grants.Decision
	for _, p := range op.Also {
		also := &grants.Call{Method: r.Method, Action: p.Action, Resource: p.Resource, Query: d.Query, Header: out.Header,
			Body: d.Body, BodyJSON: call.BodyJSON, HasBody: call.HasBody}
		pd, err := s.b.Permit(l, name, also, d)
		if err != nil {
			d.Release()
			deny(l, fmt.Errorf("%s on %s (required by %s): %w", p.Action, p.Resource, p.Because, err))
			return
		}
		permits = append(permits, pd)
	}
	if s.b.Gated(l, d, permits...) {
		// AWS clients cannot follow a 202: hold the call open for the decision.
		if r.Header.Get("Prefer") == "" {
			r.Header.Set("Prefer", "wait=60")
		}
		s.hold(w, r, l, d, out, rec, start, func(p Problem) { writeAWSError(w, u, p, reqID, false) }, permits...)
		return
	}
	s.forward(w, r, l, d, u, out, rec, start, deny, func(p Problem) { writeAWSError(w, u, p, reqID, false) })
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

// awsForwardHeaders keeps what the AWS API means (content headers, x-amz-*
// parameters such as metadata and copy source) and drops the sandbox's
// signature, its framing, and anything that is hop-by-hop.
func awsForwardHeaders(in, pinned http.Header) http.Header {
	out := http.Header{}
	for k, vs := range in {
		lk := strings.ToLower(k)
		switch {
		case lk == "authorization", lk == "x-amz-date", lk == "x-amz-content-sha256", lk == "x-amz-security-token",
			lk == "x-amz-decoded-content-length", lk == "x-amz-trailer", lk == "expect", lk == "content-length",
			lk == "amz-sdk-invocation-id", lk == "amz-sdk-request", lk == "x-amz-user-agent":
		case lk == "content-encoding":
			var kept []string
			for _, v := range vs {
				for e := range strings.SplitSeq(v, ",") {
					if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
						kept = append(kept, e)
					}
				}
			}
			if len(kept) > 0 {
				out[k] = []string{strings.Join(kept, ",")}
			}
		case strings.HasPrefix(lk, "x-amz-"), lk == "content-type", lk == "content-md5", lk == "cache-control",
			lk == "content-disposition", lk == "content-language", lk == "expires", lk == "range",
			lk == "if-match", lk == "if-none-match", lk == "if-modified-since", lk == "if-unmodified-since", lk == "accept":
			if !grants.ForbiddenHeader(k) {
				out[k] = vs
			}
		}
	}
	for k, vs := range pinned {
		out[k] = vs
	}
	return out
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
