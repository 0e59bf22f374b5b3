package upstream

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// sign uses the AWS SDK's own signer, as a sandbox's SDK would.
func sign(t *testing.T, method, url, body, secret string, at time.Time, s3 bool) *http.Request {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	hash := sha256Hex([]byte(body))
	req.Header.Set("X-Amz-Content-Sha256", hash)
	req.Header.Set("Content-Type", "text/plain")
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s3 })
	if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "ses_123", SecretAccessKey: secret}, req, hash, "s3", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	// What a server sees: Host moves from the URL to r.Host.
	req.Host = req.URL.Host
	return req
}

func TestSigV4VerifiesWhatTheSDKSigns(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const secret = "derived-session-secret"
	tests := []struct {
		name    string
		req     func() *http.Request
		secret  string
		now     time.Time
		wantErr bool
	}{
		{name: "ok", req: func() *http.Request {
			return sign(t, "PUT", "http://127.0.0.1:8700/v1/aws/s3/reports/t-42/a%20b.txt?x-id=PutObject", "hello", secret, now, true)
		}, secret: secret, now: now},
		{name: "ok, query sorted and encoded", req: func() *http.Request {
			return sign(t, "GET", "http://127.0.0.1:8700/v1/aws/s3/reports?prefix=t-42%2F&list-type=2&delimiter=%2F", "", secret, now, true)
		}, secret: secret, now: now},
		{name: "fail-wrong secret", req: func() *http.Request { return sign(t, "GET", "http://h/v1/aws/s3/b/k", "", "other", now, true) }, secret: secret, now: now, wantErr: true},
		{name: "fail-tampered path", req: func() *http.Request {
			r := sign(t, "GET", "http://h/v1/aws/s3/b/k", "", secret, now, true)
			r.URL.Path, r.URL.RawPath = "/v1/aws/s3/b/other", ""
			return r
		}, secret: secret, now: now, wantErr: true},
		{name: "fail-tampered query", req: func() *http.Request {
			r := sign(t, "GET", "http://h/v1/aws/s3/b?prefix=t-42/", "", secret, now, true)
			r.URL.RawQuery = "prefix=t-43/"
			return r
		}, secret: secret, now: now, wantErr: true},
		{name: "fail-tampered signed header", req: func() *http.Request {
			r := sign(t, "PUT", "http://h/v1/aws/s3/b/k", "x", secret, now, true)
			r.Header.Set("Content-Type", "application/evil")
			return r
		}, secret: secret, now: now, wantErr: true},
		{name: "fail-method changed", req: func() *http.Request {
			r := sign(t, "GET", "http://h/v1/aws/s3/b/k", "", secret, now, true)
			r.Method = "DELETE"
			return r
		}, secret: secret, now: now, wantErr: true},
		{name: "fail-outside clock skew", req: func() *http.Request { return sign(t, "GET", "http://h/v1/aws/s3/b/k", "", secret, now, true) },
			secret: secret, now: now.Add(16 * time.Minute), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req()
			s, err := ParseSigV4(r)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Verify(r, tt.secret, s.PayloadHash, tt.now, 15*time.Minute, true)
			if tt.wantErr != (err != nil) {
				t.Fatalf("Verify = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrSignature) {
				t.Fatalf("error %v is not ErrSignature", err)
			}
		})
	}
}

func TestDecodeChunkedUnsignedTrailer(t *testing.T) {
	body := "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
	s := &SigV4{}
	data, tr, err := s.DecodeChunked(bytes.NewReader([]byte(body)), "", 1<<20)
	if err != nil || string(data) != "hello world" || tr.Get("x-amz-checksum-crc32") != "AAAAAA==" {
		t.Fatalf("decoded %q %v %v", data, tr, err)
	}
	if _, _, err := s.DecodeChunked(bytes.NewReader([]byte("5\r\nhel")), "", 1<<20); err == nil {
		t.Fatal("a truncated body decoded")
	}
	if _, _, err := s.DecodeChunked(bytes.NewReader([]byte(body)), "", 4); err == nil {
		t.Fatal("an oversized body decoded")
	}
}

func TestDecodeChunkedSignedVerifiesEveryChunk(t *testing.T) {
	s := &SigV4{Date: "20261202", Region: "us-east-1", Service: "s3", Signature: "seedsignature", Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	const secret = "session-secret"
	key := signingKey(secret, s)
	var body strings.Builder
	prev := s.Signature
	for _, chunk := range []string{"hello ", "world", ""} {
		sts := "AWS4-HMAC-SHA256-PAYLOAD\n20261202T120000Z\n" + s.scope() + "\n" + prev + "\n" + emptySHA256 + "\n" + sha256Hex([]byte(chunk))
		sig := hexEncode(hmacSHA256(key, sts))
		body.WriteString(strings.ToLower(strconv.FormatInt(int64(len(chunk)), 16)) + ";chunk-signature=" + sig + "\r\n" + chunk + "\r\n")
		prev = sig
	}
	data, _, err := s.DecodeChunked(strings.NewReader(body.String()), secret, 1<<20)
	if err != nil || string(data) != "hello world" {
		t.Fatalf("decoded %q, %v", data, err)
	}
	tampered := strings.Replace(body.String(), "world", "WORLD", 1)
	if _, _, err := s.DecodeChunked(strings.NewReader(tampered), secret, 1<<20); !errors.Is(err, ErrSignature) {
		t.Fatalf("a tampered chunk: %v", err)
	}
	if _, _, err := s.DecodeChunked(strings.NewReader(body.String()), "other-secret", 1<<20); !errors.Is(err, ErrSignature) {
		t.Fatalf("chunks signed with another secret: %v", err)
	}
}

func hexEncode(b []byte) string { return hex.EncodeToString(b) }
