package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/httpapi"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The SigV4 door checks a request's X-Amz-Date against the broker's clock,
// within 15 minutes either way. The broker runs here on a fake clock set
// far from the wall clock, so the test shows it is that clock that decides.
func TestSigV4SkewOnInjectedClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2031, 6, 1, 9, 0, 0, 0, time.UTC))
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "id,total\n")
	}))
	t.Cleanup(up.Close)
	base, _ := url.Parse(up.URL)
	creds := upstream.StaticAWSCredentials("AKIAREALKEY0000", "CANARY-aws-secret-for-skew-test")
	s3 := &upstream.Upstream{Name: "s3", Kind: "aws", BaseURL: base, Timeout: 5 * time.Second, MaxBody: 1 << 20,
		Source: upstream.AWSSource(creds, "static"), AWS: &upstream.AWS{Service: "s3", Region: "us-east-1", Creds: creds}}
	s3.SetTransport(upstream.NewTransport())
	b := brokertest.MustOpenBroker(t, brokertest.WithClock(clk), brokertest.WithUpstream(s3),
		brokertest.WithOptions(func(o *broker.Options) { o.DefaultTTL = time.Hour })).Broker
	api, err := httpapi.New(b, brokertest.Discard(), httpapi.UIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sandbox := httptest.NewServer(api.Handler(httpapi.SandboxPlane))
	control := httptest.NewServer(api.Handler(httpapi.ControlPlane))
	t.Cleanup(func() { sandbox.Close(); control.Close() }) // then the kit closes the broker and its store

	req, _ := http.NewRequest("POST", control.URL+"/v1/sessions", strings.NewReader(`{"task_id": "t", "untrusted_input": false,
		"grants": [{"upstream": "s3", "rules": [{"action": "s3:GetObject", "resource": "arn:aws:s3:::reports/*"}]}]}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		AWS struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 201 || sess.AWS.SecretAccessKey == "" {
		t.Fatalf("create session: %d %v", resp.StatusCode, err)
	}
	sandboxCreds := aws.Credentials{AccessKeyID: sess.AWS.AccessKeyID, SecretAccessKey: sess.AWS.SecretAccessKey}
	emptyHash := sha256.Sum256(nil)

	tests := []struct {
		name   string
		offset time.Duration // of the signing time from the broker's clock
		want   int
	}{
		{"fail-16m in the past", -16 * time.Minute, http.StatusForbidden},
		{"fail-16m in the future", 16 * time.Minute, http.StatusForbidden},
		{"fail-signed on the wall clock", time.Now().Sub(clk.Now()), http.StatusForbidden}, // years apart
		{"ok-14m in the past", -14 * time.Minute, http.StatusOK},
		{"ok-14m in the future", 14 * time.Minute, http.StatusOK},
		{"ok-on the broker's clock", 0, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			req, _ := http.NewRequest("GET", sandbox.URL+"/v1/aws/s3/reports/a.csv", nil)
			req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(emptyHash[:]))
			signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
			if err := signer.SignHTTP(context.Background(), sandboxCreds, req, hex.EncodeToString(emptyHash[:]), "s3", "us-east-1", clk.Now().Add(tt.offset)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "CANARY") {
				t.Fatalf("the answer carries the credential: %s", body)
			}
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if sent := hits.Load() - before; (tt.want == http.StatusOK) != (sent == 1) {
				t.Fatalf("requests that reached the upstream: %d", sent)
			}
			if tt.want == http.StatusForbidden && !strings.Contains(string(body), "<Code>SignatureDoesNotMatch</Code>") {
				t.Fatalf("refusal is not a signature error: %s", body)
			}
		})
	}
}
