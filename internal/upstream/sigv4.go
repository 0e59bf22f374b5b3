package upstream

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrSignature is a SigV4 request that does not verify.
var ErrSignature = errors.New("signature does not verify")

// Payload hash values with a meaning of their own.
const (
	UnsignedPayload          = "UNSIGNED-PAYLOAD"
	StreamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	StreamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	emptySHA256              = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// SigV4 is a parsed AWS Signature Version 4 Authorization header.
type SigV4 struct {
	AccessKey     string
	Date          string // yyyymmdd of the scope
	Region        string
	Service       string
	SignedHeaders []string
	Signature     string
	Time          time.Time // X-Amz-Date
	PayloadHash   string    // X-Amz-Content-Sha256 (may be empty outside S3)
}

func (s *SigV4) scope() string {
	return s.Date + "/" + s.Region + "/" + s.Service + "/aws4_request"
}

// ParseSigV4 reads the Authorization and X-Amz-Date headers.
func ParseSigV4(r *http.Request) (*SigV4, error) {
	h := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(h, "AWS4-HMAC-SHA256 ")
	if !ok {
		return nil, fmt.Errorf("%w: not an AWS4-HMAC-SHA256 Authorization header", ErrSignature)
	}
	s := &SigV4{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			f := strings.Split(v, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return nil, fmt.Errorf("%w: malformed credential scope", ErrSignature)
			}
			s.AccessKey, s.Date, s.Region, s.Service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			s.SignedHeaders = strings.Split(v, ";")
		case "Signature":
			s.Signature = v
		}
	}
	if s.AccessKey == "" || s.Signature == "" || len(s.SignedHeaders) == 0 {
		return nil, fmt.Errorf("%w: incomplete Authorization header", ErrSignature)
	}
	t, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return nil, fmt.Errorf("%w: missing or malformed X-Amz-Date", ErrSignature)
	}
	if t.Format("20060102") != s.Date {
		return nil, fmt.Errorf("%w: X-Amz-Date outside the credential scope", ErrSignature)
	}
	s.Time = t
	s.PayloadHash = r.Header.Get("X-Amz-Content-Sha256")
	signsHost := false
	for _, h := range s.SignedHeaders {
		if h == "host" {
			signsHost = true
		}
	}
	if !signsHost {
		return nil, fmt.Errorf("%w: host is not signed", ErrSignature)
	}
	return s, nil
}

// signingKey derives the SigV4 key for the scope.
func signingKey(secret string, s *SigV4) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), s.Date)
	k = hmacSHA256(k, s.Region)
	k = hmacSHA256(k, s.Service)
	return hmacSHA256(k, "aws4_request")
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Verify checks the request's signature with secret. payloadHash is the
// hash the client declared (or computed from the body outside S3); the
// caller checks that it matches the body. now±skew must contain X-Amz-Date.
// s3 selects S3's canonical URI (the path as sent, not encoded again).
func (s *SigV4) Verify(r *http.Request, secret, payloadHash string, now time.Time, skew time.Duration, s3 bool) error {
	if d := now.Sub(s.Time); d > skew || d < -skew {
		return fmt.Errorf("%w: request time is outside the allowed clock skew", ErrSignature)
	}
	canonical := s.canonicalRequest(r, payloadHash, s3)
	sts := "AWS4-HMAC-SHA256\n" + s.Time.Format("20060102T150405Z") + "\n" + s.scope() + "\n" + sha256Hex([]byte(canonical))
	want := hex.EncodeToString(hmacSHA256(signingKey(secret, s), sts))
	if !hmac.Equal([]byte(want), []byte(s.Signature)) {
		return ErrSignature
	}
	return nil
}

func (s *SigV4) canonicalRequest(r *http.Request, payloadHash string, s3 bool) string {
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if !s3 {
		path = awsEscape(path, false)
	}
	var b strings.Builder
	b.WriteString(r.Method + "\n" + path + "\n" + canonicalQuery(r.URL.RawQuery) + "\n")
	for _, h := range s.SignedHeaders {
		var vals []string
		switch {
		case h == "host":
			vals = []string{r.Host}
		case h == "content-length" && r.Header.Get("Content-Length") == "" && r.ContentLength >= 0:
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		default:
			vals = append([]string(nil), r.Header.Values(h)...)
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		b.WriteString(h + ":" + strings.Join(vals, ",") + "\n")
	}
	b.WriteString("\n" + strings.Join(s.SignedHeaders, ";") + "\n" + payloadHash)
	return b.String()
}

func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type kv struct{ k, v string }
	var ps []kv
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			dk, dv = k, v
		}
		ps = append(ps, kv{awsEscape(dk, true), awsEscape(dv, true)})
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].k != ps[j].k {
			return ps[i].k < ps[j].k
		}
		return ps[i].v < ps[j].v
	})
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.k + "=" + p.v
	}
	return strings.Join(out, "&")
}

// awsEscape is SigV4's URI encoding: unreserved characters stay, the rest
// is %XX upper case; "/" is encoded only when encodeSlash.
func awsEscape(s string, encodeSlash bool) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !encodeSlash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
		}
	}
	return b.String()
}

// DecodeChunked reads an aws-chunked body. With secret set (signed
// streaming), every chunk signature is verified in chain from the seed
// signature. Trailing headers (checksums) are returned.
func (s *SigV4) DecodeChunked(body io.Reader, secret string, limit int64) ([]byte, http.Header, error) {
	br := bufio.NewReader(io.LimitReader(body, limit+64<<10))
	var out bytes.Buffer
	prev := s.Signature
	var key []byte
	if secret != "" {
		key = signingKey(secret, s)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, nil, fmt.Errorf("%w: truncated aws-chunked body", ErrSignature)
		}
		line = strings.TrimRight(line, "\r\n")
		sizeHex, ext, _ := strings.Cut(line, ";")
		size, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || size < 0 || int64(out.Len())+size > limit {
			return nil, nil, fmt.Errorf("%w: malformed or oversized aws-chunked body", ErrSignature)
		}
		chunk := make([]byte, size)
		if _, err := io.ReadFull(br, chunk); err != nil {
			return nil, nil, fmt.Errorf("%w: truncated aws-chunked body", ErrSignature)
		}
		if key != nil {
			sig, ok := strings.CutPrefix(ext, "chunk-signature=")
			sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + s.Time.Format("20060102T150405Z") + "\n" + s.scope() + "\n" + prev + "\n" + emptySHA256 + "\n" + sha256Hex(chunk)
			want := hex.EncodeToString(hmacSHA256(key, sts))
			if !ok || !hmac.Equal([]byte(want), []byte(sig)) {
				return nil, nil, fmt.Errorf("%w: chunk signature", ErrSignature)
			}
			prev = sig
		}
		out.Write(chunk)
		if size == 0 {
			break
		}
		if crlf, _ := br.Peek(2); string(crlf) == "\r\n" {
			_, _ = br.Discard(2)
		}
	}
	trailers := http.Header{}
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" || err != nil {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.EqualFold(k, "x-amz-trailer-signature") {
			trailers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return out.Bytes(), trailers, nil
}

// unsignedHeaders are the headers an outbound request does not sign, as
// AWS's SDKs leave them out: a proxy or the transport may change them.
var unsignedHeaders = map[string]bool{
	"Authorization": true, "User-Agent": true, "X-Amzn-Trace-Id": true, "Expect": true, "Transfer-Encoding": true,
}

// signV4 signs an outbound request to AWS with c (SigV4, the
// Authorization header), as the AWS SDK's signer does: X-Amz-Date,
// X-Amz-Content-Sha256 (payloadHash) and, for temporary credentials,
// X-Amz-Security-Token are set; every header but unsignedHeaders is signed,
// with host and a positive content-length; the query is rewritten in its
// canonical form (sorted, SigV4-encoded), so what is sent is what was
// signed. s3 selects S3's canonical URI (the path as sent).
func signV4(req *http.Request, payloadHash string, c AWSCredentials, service, region string, s3 bool, at time.Time) {
	at = at.UTC()
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	req.Header.Set("X-Amz-Date", at.Format("20060102T150405Z"))
	if c.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", c.SessionToken)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if h, port, err := net.SplitHostPort(host); err == nil && (req.URL.Scheme == "https" && port == "443" || req.URL.Scheme == "http" && port == "80") {
		host = h
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
		req.Host = host
	}
	values := map[string][]string{"host": {host}}
	if req.ContentLength > 0 {
		values["content-length"] = []string{strconv.FormatInt(req.ContentLength, 10)}
	}
	for k, vs := range req.Header {
		if unsignedHeaders[k] || strings.EqualFold(k, "Content-Length") {
			continue
		}
		lk := strings.ToLower(k)
		values[lk] = append(values[lk], vs...)
	}
	signed := slices.Sorted(maps.Keys(values))
	req.URL.RawQuery = canonicalQuery(req.URL.RawQuery)
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if !s3 {
		path = awsEscape(path, false)
	}
	var b strings.Builder
	b.WriteString(req.Method + "\n" + path + "\n" + req.URL.RawQuery + "\n")
	for _, h := range signed {
		vs := values[h]
		clean := make([]string, len(vs))
		for i, v := range vs {
			clean[i] = strings.TrimSpace(collapseSpaces(v))
		}
		b.WriteString(h + ":" + strings.Join(clean, ",") + "\n")
	}
	sh := strings.Join(signed, ";")
	b.WriteString("\n" + sh + "\n" + payloadHash)
	s := &SigV4{Date: at.Format("20060102"), Region: region, Service: service}
	sts := "AWS4-HMAC-SHA256\n" + at.Format("20060102T150405Z") + "\n" + s.scope() + "\n" + sha256Hex([]byte(b.String()))
	sig := hex.EncodeToString(hmacSHA256(signingKey(c.SecretAccessKey, s), sts))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.AccessKeyID+"/"+s.scope()+", SignedHeaders="+sh+", Signature="+sig)
}

// collapseSpaces turns each run of spaces (spaces only, as SigV4 says)
// into one.
func collapseSpaces(s string) string {
	if !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	space := false
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
