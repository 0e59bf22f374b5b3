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
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// errAWSSignature is a SigV4 request that does not verify.
var errAWSSignature = fault.Hidden(fault.InvalidSignature, "the request signature does not match (check the session's aws_credentials)")

// awsProxy is ANY /v1/aws/{upstream}/...: the stock AWS SDK or CLI pointed
// at the broker (AWS_ENDPOINT_URL), signing with the session's
// aws_credentials. The caller is named by the signature's access key.
func (s *Server) awsProxy(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "upstream")
	u, _ := s.b.Upstream(name)
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/aws/"+name)
	if rest == "" {
		rest = "/"
	}
	in := broker.Inbound{Upstream: name, Method: r.Method, Wait: awsWait(r)}
	var sig *upstream.SigV4
	if u == nil || u.AWS == nil {
		in.Refused = broker.ErrUnknownUpstream
	} else if parsed, err := upstream.ParseSigV4(r); err != nil {
		in.Refused = errors.Join(errAWSSignature, err)
	} else {
		sig, in.Caller = parsed, broker.SigV4Caller(parsed.AccessKey, remoteAddr(r))
	}
	in.Parse = func(a *broker.Admitted) (*broker.Request, error) { return readAWS(r, a, sig, rest) }
	out := s.outcomes(w, r, awsProblem(u))
	s.b.Do(r.Context(), in, out.write)
	out.end()
}

// awsWait is how long a gated AWS call waits: AWS clients cannot follow a
// 202, so the call holds its connection for the decision (Prefer: wait=60
// unless the client asked otherwise).
func awsWait(r *http.Request) time.Duration {
	if r.Header.Get("Prefer") == "" {
		r.Header.Set("Prefer", "wait=60")
	}
	wait, _ := preferWait(r)
	return wait
}

// awsProblem writes errors in the AWS protocol of upstream u (nil: none).
func awsProblem(u *upstream.Upstream) func(http.ResponseWriter, error, string) {
	return func(w http.ResponseWriter, err error, requestID string) {
		writeAWSError(w, u, problemFor(err), requestID)
	}
}

// readAWS reads one admitted SigV4 request, whichever door it came in by:
// it verifies the signature against the request as the client sent and
// signed it (its Host and path), maps rest (the escaped path below the
// upstream, path-style for S3) to an action and resource, and builds the
// canonical request; the pipeline checks the grant, re-signs with the real
// credentials for the configured endpoint and forwards.
func readAWS(r *http.Request, a *broker.Admitted, sig *upstream.SigV4, rest string) (*broker.Request, error) {
	u := a.Upstream()
	body, payloadHash, err := readAWSBody(r, sig, a.AWSSecret(), u.MaxBody, u.AWS.S3())
	if err != nil {
		return nil, err
	}
	if err := a.VerifySigV4(sig, r, payloadHash, u.AWS.S3()); err != nil {
		return nil, errors.Join(errAWSSignature, err)
	}
	decoded, err := url.PathUnescape(rest)
	if err != nil || !strings.HasPrefix(decoded, "/") || strings.ContainsRune(decoded, 0) {
		return nil, grants.ErrBadRequest
	}
	a.SetPath(rest, int64(len(body)))
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, grants.ErrBadRequest
	}
	params, err := grants.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	var form url.Values
	if !u.AWS.S3() && len(body) > 0 && formBody(r.Header.Get("Content-Type")) {
		form, _ = url.ParseQuery(string(body)) // what parses is what a lenient upstream could read
	}
	op, err := u.AWS.Operation(upstream.AWSRequest{Method: r.Method, Path: decoded, Query: query, Header: r.Header, Form: form, Body: body})
	if err != nil {
		return nil, err
	}
	if op.SendPath != "" {
		rest = op.SendPath // built from the checked bucket and key: the upstream reads what was checked
	}
	a.SetPath(rest, int64(len(body)))
	req := &broker.Request{Call: grants.Call{Method: r.Method, Action: op.Action, Resource: op.Resource, Query: params, Header: r.Header, HasBody: len(body) > 0},
		Raw: body, AWS: &broker.AWSCall{Path: rest, RawQuery: r.URL.RawQuery, Also: op.Also}}
	if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
		if v, err := grants.ParseJSON(body); err == nil {
			req.Body, req.BodyJSON = v, true
		}
	}
	return req, nil
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
func writeAWSError(w http.ResponseWriter, u *upstream.Upstream, p Problem, reqID string) {
	code := awsCode(p.kind)
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

// awsCode is the AWS error code a kind is answered with: one the SDKs
// know how to treat (SlowDown is retried, AccessDenied is not), never a
// throttling code for too many pending actions (the SDK must not retry it
// on its own).
func awsCode(k fault.Kind) string {
	switch k {
	case fault.InvalidSignature:
		return "SignatureDoesNotMatch"
	case fault.TooManyPending:
		return "TooManyPendingActions"
	}
	switch k.Status() {
	case 400:
		return "InvalidRequest"
	case 401, 403:
		return "AccessDenied"
	case 404:
		return "NoSuchUpstream"
	case 405:
		return "MethodNotAllowed"
	case 409:
		return "Conflict"
	case 413:
		return "EntityTooLarge"
	case 429:
		return "SlowDown"
	case 503:
		return "ServiceUnavailable"
	case 504:
		return "RequestTimeout"
	}
	return "InternalError"
}
