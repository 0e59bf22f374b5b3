package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
)

// scopedSTS is a loopback STS recording every AssumeRole form; it issues
// distinct keys per call.
type scopedSTS struct {
	*httptest.Server
	mu    sync.Mutex
	forms []url.Values
}

func newScopedSTS(t *testing.T) *scopedSTS {
	f := &scopedSTS{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		f.mu.Lock()
		f.forms = append(f.forms, form)
		n := len(f.forms)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIASCOPEDKEY%04d</AccessKeyId><SecretAccessKey>scoped-session-secret-%d</SecretAccessKey><SessionToken>scoped-session-token-%d</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/reports/s</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult></AssumeRoleResponse>`, n, n, n, time.Now().Add(15*time.Minute).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(f.Close)
	return f
}

// assume_role with scope_to_grant, end to end: the stock SDK through the
// broker's SigV4 door; the broker asks STS for the session's own keys with
// a session policy of exactly its grant, S3 (gofakes3) sees the call signed
// with those keys and never the base key, the sandbox never sees a minted
// value, and a killed session's calls stop.
func TestScopedSTSEndToEnd(t *testing.T) {
	sts := newScopedSTS(t)
	f := newFakeS3(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: ` + f.URL + `
    credential:
      source: env
      access_key_name: REAL_AWS_KEY_ID
      secret_key_name: REAL_AWS_SECRET
      assume_role: {role_arn: "arn:aws:iam::123456789012:role/reports", sts_endpoint: "` + sts.URL + `", scope_to_grant: true}
`, Env: map[string]string{"REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	rules := []any{
		map[string]any{"action": "s3:GetObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container", "ttl": "40m",
		"grants": []any{map[string]any{"upstream": "s3", "rules": rules}}})
	var s struct {
		ID             string `json:"id"`
		AWSCredentials struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("aws session: %d %s", r.Status, r.Body)
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s.AWSCredentials.AccessKeyID, SecretAccessKey: s.AWSCredentials.SecretAccessKey}, nil
		})),
		awsconfig.WithSharedConfigFiles([]string{filepath.Join(t.TempDir(), "none")}), awsconfig.WithSharedCredentialsFiles([]string{filepath.Join(t.TempDir(), "none")}))
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(b.Sandbox + "/v1/aws/s3"); o.UsePathStyle = true })
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv"), Body: strings.NewReader("id,total\n1,42\n")}); err != nil {
		t.Fatalf("PutObject inside the grant: %v", err)
	}
	obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	data, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if string(data) != "id,total\n1,42\n" {
		t.Fatalf("object: %q", data)
	}

	sts.mu.Lock()
	forms := append([]url.Values(nil), sts.forms...)
	sts.mu.Unlock()
	if len(forms) != 1 {
		t.Fatalf("STS asked %d times for one session's two calls, want 1", len(forms))
	}
	want, _ := awscred.SessionPolicy([]grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/t-42/*"}, {Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/*"}})
	// The session's remaining life, in whole seconds: its 40 minutes less what the test took.
	secs, _ := strconv.Atoi(forms[0].Get("DurationSeconds"))
	if forms[0].Get("Policy") != want || secs < 2300 || secs > 2400 || forms[0].Get("RoleSessionName") != "airlock-"+s.ID {
		t.Fatalf("AssumeRole form: %v", forms[0])
	}
	f.mu.Lock()
	auths := append([]string(nil), f.auths...)
	f.mu.Unlock()
	if len(auths) < 2 {
		t.Fatalf("S3 saw %d calls, want 2", len(auths))
	}
	for _, a := range auths {
		if !strings.Contains(a, "Credential=ASIASCOPEDKEY0001/") || strings.Contains(a, "AKIAREALKEY0000") {
			t.Fatalf("S3 saw a call not signed with the session's minted keys: %q", a)
		}
	}
	brokertest.AssertNoCanary(t, "the broker's logs", b.Logs.Bytes())
	if strings.Contains(string(b.Logs.Bytes()), "scoped-session-secret") {
		t.Fatal("the logs carry a minted secret")
	}

	if r := b.Do("DELETE", b.Control+"/v1/sessions/"+s.ID, brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("kill: %d %s", r.Status, r.Body)
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv")}); err == nil {
		t.Fatal("a killed session's call went through")
	}
}
