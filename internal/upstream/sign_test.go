package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/go-cmp/cmp"
)

// signV4 signs outbound requests to AWS as the SDK's own signer does (it
// replaced it, so that the core builds without the SDK): the same request,
// signed by both at the same time with the same keys, leaves with the same
// Authorization, X-Amz-* headers, query and host; and what it signs
// verifies.
func TestSignV4SignsAsTheSDK(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	keys := AWSCredentials{AccessKeyID: "AKIAREAL0000", SecretAccessKey: "real-secret"}
	temp := AWSCredentials{AccessKeyID: "ASIATEMP0000", SecretAccessKey: "temp-secret", SessionToken: "temp-session-token"}
	tests := []struct {
		name    string
		method  string
		url     string
		header  http.Header
		body    string
		creds   AWSCredentials
		service string
	}{
		{name: "s3 get", method: "GET", url: "https://s3.us-east-1.amazonaws.com/reports/t-42/q1.csv", creds: keys, service: "s3"},
		{name: "s3 put with body, metadata and a session token", method: "PUT", url: "https://s3.us-east-1.amazonaws.com/reports/t-42/a%20b%2Bc.txt",
			header: http.Header{"Content-Type": {"text/plain"}, "X-Amz-Meta-Owner": {"  team   a  "}, "X-Amz-Tagging": {"k=v&x=y"}},
			body:   "hello", creds: temp, service: "s3"},
		{name: "s3 list, query reordered and re-encoded", method: "GET", url: "https://s3.us-east-1.amazonaws.com/reports?prefix=t-42%2F&list-type=2&delimiter=%2F&continuation-token=a+b%2Bc~*&max-keys=10",
			creds: keys, service: "s3"},
		{name: "s3 sub-resource without a value, repeated keys", method: "POST", url: "https://s3.us-east-1.amazonaws.com/reports/big.bin?uploads&z=2&z=1",
			creds: keys, service: "s3"},
		{name: "s3 default port stripped", method: "GET", url: "https://s3.us-east-1.amazonaws.com:443/reports/k", creds: keys, service: "s3"},
		{name: "s3 other port kept", method: "GET", url: "http://127.0.0.1:9000/reports/k", creds: keys, service: "s3"},
		{name: "unsigned headers left out", method: "GET", url: "https://s3.us-east-1.amazonaws.com/reports/k",
			header: http.Header{"User-Agent": {"aws-cli/2"}, "X-Amzn-Trace-Id": {"Root=1"}, "Expect": {"100-continue"}, "Accept": {"*/*"}, "Range": {"bytes=0-9"}},
			creds:  keys, service: "s3"},
		{name: "dynamodb json, path escaped again", method: "POST", url: "https://dynamodb.us-east-1.amazonaws.com/",
			header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amz-Target": {"DynamoDB_20120810.GetItem"}},
			body:   `{"TableName":"t"}`, creds: temp, service: "dynamodb"},
		{name: "non-s3 path with reserved characters", method: "GET", url: "https://lambda.us-east-1.amazonaws.com/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A1%3Afunction%3Af/configuration",
			creds: keys, service: "lambda"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			build := func() *http.Request {
				r, err := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				if tt.body == "" {
					r.Body, r.ContentLength = nil, 0
				}
				for k, vs := range tt.header {
					r.Header[k] = append([]string(nil), vs...)
				}
				return r
			}
			hash := sha256Hex([]byte(tt.body))
			s3 := tt.service == "s3"
			ours := build()
			signV4(ours, hash, tt.creds, tt.service, "us-east-1", s3, at)

			sdk := build()
			sdk.Header.Set("X-Amz-Content-Sha256", hash)
			signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s3 })
			c := aws.Credentials{AccessKeyID: tt.creds.AccessKeyID, SecretAccessKey: tt.creds.SecretAccessKey, SessionToken: tt.creds.SessionToken}
			if err := signer.SignHTTP(context.Background(), c, sdk, hash, tt.service, "us-east-1", at); err != nil {
				t.Fatal(err)
			}
			type wire struct {
				Host, Query string
				Header      http.Header
			}
			got := wire{ours.Host, ours.URL.RawQuery, ours.Header}
			want := wire{sdk.Host, sdk.URL.RawQuery, sdk.Header}
			if got.Host == "" {
				got.Host = ours.URL.Host
			}
			if want.Host == "" {
				want.Host = sdk.URL.Host
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("signed unlike the SDK (-sdk +ours):\n%s", d)
			}

			// What is signed verifies, as the broker's AWS door checks a sandbox's request.
			ours.Host = got.Host
			sv, err := ParseSigV4(ours)
			if err != nil {
				t.Fatal(err)
			}
			if err := sv.Verify(ours, tt.creds.SecretAccessKey, hash, at, time.Minute, s3); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}

// What Do sends to an aws upstream, as the server receives it (the
// transport's own headers added, Accept-Encoding set after signing),
// verifies with the real secret key, for S3's and other services' URIs,
// with and without a session token.
func TestDoSignsWhatTheUpstreamVerifies(t *testing.T) {
	type received struct {
		err   error
		token string
	}
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc := received{token: r.Header.Get("X-Amz-Security-Token")}
		s, err := ParseSigV4(r)
		if err == nil && s.PayloadHash != sha256Hex(body) {
			err = ErrSignature
		}
		if err == nil {
			err = s.Verify(r, "CANARY-real-secret", s.PayloadHash, time.Now(), 5*time.Minute, s.Service == "s3")
		}
		rc.err = err
		got <- rc
	}))
	defer srv.Close()
	tests := []struct {
		name    string
		service string
		creds   AWSCredentials
		out     Outbound
	}{
		{name: "s3 put", service: "s3", creds: AWSCredentials{AccessKeyID: "AKIAREAL", SecretAccessKey: "CANARY-real-secret"},
			out: Outbound{Method: "PUT", Path: "/reports/t-42/a%20b.csv", Query: "x-id=PutObject", Body: []byte("id,total\n"),
				Header: http.Header{"Content-Type": {"text/csv"}, "X-Amz-Meta-Team": {"a"}}}},
		{name: "s3 list, temporary keys", service: "s3", creds: AWSCredentials{AccessKeyID: "ASIATEMP", SecretAccessKey: "CANARY-real-secret", SessionToken: "CANARY-token"},
			out: Outbound{Method: "GET", Path: "/reports", Query: "prefix=t-42%2F&list-type=2", Header: http.Header{}}},
		{name: "dynamodb", service: "dynamodb", creds: AWSCredentials{AccessKeyID: "AKIAREAL", SecretAccessKey: "CANARY-real-secret"},
			out: Outbound{Method: "POST", Path: "/", Body: []byte(`{"TableName":"t"}`),
				Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amz-Target": {"DynamoDB_20120810.GetItem"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bu, _ := url.Parse(srv.URL)
			u := &Upstream{Name: "aws", Kind: "aws", BaseURL: bu, AWS: &AWS{Service: tt.service, Region: "us-east-1"}, transport: NewTransport()}
			resp, err := u.Do(t.Context(), &tt.out, Credential{Secret: NewSecret(tt.creds.SecretAccessKey), AWS: tt.creds})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			rc := <-got
			if rc.err != nil {
				t.Fatalf("the upstream could not verify the request: %v", rc.err)
			}
			if rc.token != tt.creds.SessionToken {
				t.Fatalf("X-Amz-Security-Token = %q, want %q", rc.token, tt.creds.SessionToken)
			}
		})
	}
}
