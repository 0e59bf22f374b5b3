package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Class 3 of issue 11: an AWS grant for one operation must not let the
// sandbox perform others. These attacks go through the real broker with
// the stock aws-sdk-go-v2 client or requests signed with the session's
// aws_credentials, against a gofakes3 upstream that records what it got.

// awsAtkRecorded is one request the S3 upstream received.
type awsAtkRecorded struct {
	Method  string
	RawPath string // as on the wire
	Path    string // decoded: what S3 reads as /bucket/key
	Query   url.Values
	Header  http.Header
}

// awsAtkS3 is gofakes3 on loopback, recording every request.
type awsAtkS3 struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []awsAtkRecorded
}

func awsAtkNewS3(t *testing.T) *awsAtkS3 {
	t.Helper()
	backend := s3mem.New()
	for _, b := range []string{"reports", "secret"} {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := backend.PutObject("secret", "payroll.csv", map[string]string{}, strings.NewReader("name,salary\n"), 12, nil); err != nil {
		t.Fatal(err)
	}
	f := &awsAtkS3{}
	h := gofakes3.New(backend).Server()
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs = append(f.reqs, awsAtkRecorded{Method: r.Method, RawPath: r.URL.EscapedPath(), Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone()})
		f.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *awsAtkS3) received() []awsAtkRecorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]awsAtkRecorded(nil), f.reqs...)
}

// awsAtkEnv is a broker with an S3 upstream ("s3", on gofakes3) and an SQS
// and a DynamoDB upstream (on a recording HTTP upstream), and one session.
type awsAtkEnv struct {
	b      *brokertest.Proc
	s3     *awsAtkS3
	other  *brokertest.Upstream
	key    string // the session's aws_credentials
	secret string
}

// awsAtkStart starts the broker and a session with the given grants.
func awsAtkStart(t *testing.T, grants ...map[string]any) *awsAtkEnv {
	t.Helper()
	f := awsAtkNewS3(t)
	up := brokertest.NewUpstream(t)
	cred := "    credential: {source: env, access_key_name: REAL_AWS_KEY_ID, secret_key_name: REAL_AWS_SECRET}\n"
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: ` + f.URL + "\n" + cred + `  - name: sqs
    type: aws
    service: sqs
    region: us-east-1
    endpoint: ` + up.URL + "\n" + cred + `  - name: ddb
    type: aws
    service: dynamodb
    region: us-east-1
    endpoint: ` + up.URL + "\n" + cred,
		Env: map[string]string{"REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	gs := make([]any, len(grants))
	for i, g := range grants {
		gs[i] = g
	}
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container", "grants": gs})
	var s struct {
		AWSCredentials struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 || s.AWSCredentials.SecretAccessKey == "" {
		t.Fatalf("aws session: %d %s", r.Status, r.Body)
	}
	return &awsAtkEnv{b: b, s3: f, other: up, key: s.AWSCredentials.AccessKeyID, secret: s.AWSCredentials.SecretAccessKey}
}

// awsAtkPutOnlyGrant allows writing and reading objects under
// reports/t-42/ and listing that prefix: nothing else.
func awsAtkPutOnlyGrant() map[string]any {
	return map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:GetObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:ListBucket", "resource": "arn:aws:s3:::reports", "constraints": map[string]any{
			"query.prefix": map[string]any{"pattern": "t-42/.*", "required": true}}},
	}}
}

// client is the stock SDK pointed at the broker with the session's keys.
func (e *awsAtkEnv) client(t *testing.T) *s3.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(),
		awsconfig.WithRegion("us-east-1"),
		awsconfig.WithSharedConfigFiles([]string{filepath.Join(t.TempDir(), "none")}),
		awsconfig.WithSharedCredentialsFiles([]string{filepath.Join(t.TempDir(), "none")}),
		awsconfig.WithCredentialsProvider(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: e.key, SecretAccessKey: e.secret}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(e.b.Sandbox + "/v1/aws/s3")
		o.UsePathStyle = true
		o.RetryMaxAttempts = 1
	})
}

// send signs a request with the session's aws_credentials, exactly as
// given (the escaped path is sent and signed as is), and sends it.
func (e *awsAtkEnv) send(t *testing.T, service, method, rawURL string, header http.Header, body string) brokertest.Response {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL = u
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	if service == "s3" {
		req.Header.Set("X-Amz-Content-Sha256", hash)
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
	if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: e.key, SecretAccessKey: e.secret}, req, hash, service, "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := e.b.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	brokertest.AssertNoCanary(t, "aws answer", data)
	return brokertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// awsAtkRefused asserts an SDK error carrying the Airlock code.
func awsAtkRefused(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.ErrorMessage(), "airlock "+code) {
		t.Errorf("%s: want a refusal with airlock %s, got %v", what, code, err)
	}
}

// awsAtkNothingSent asserts that the upstream received nothing after n requests.
func awsAtkNothingSent(t *testing.T, what string, got []awsAtkRecorded, n int) {
	t.Helper()
	if len(got) != n {
		last := got[len(got)-1]
		t.Errorf("%s reached the upstream: %s %s?%s", what, last.Method, last.RawPath, last.Query.Encode())
	}
}

// TestAWSAttackSubresourcesAndHeaders: a grant for PutObject/GetObject on
// reports/t-42/* (and ListBucket on that prefix) does not let the sandbox
// set an ACL, a retention, a legal hold, read a bucket's policy or ACL, use
// a sub-resource the broker does not know, or copy what it may not read;
// neither through a query key nor through a header.
func TestAWSAttackSubresourcesAndHeaders(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	c := e.client(t)
	ctx := context.Background()
	bucket, key := aws.String("reports"), aws.String("t-42/a.csv")

	// Allowed calls still work.
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, Body: strings.NewReader("id,total\n1,42\n")}); err != nil {
		t.Fatalf("PutObject inside the grant: %v", err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: bucket, Key: aws.String("t-42/copy.csv"), CopySource: aws.String("reports/t-42/a.csv")}); err != nil {
		t.Fatalf("CopyObject inside the grant: %v", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("t-42/")}); err != nil {
		t.Fatalf("ListObjectsV2 in the prefix: %v", err)
	}
	base := len(e.s3.received())

	until := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	sdk := []struct {
		name string
		call func() error
		code string
	}{
		{"PutObjectAcl (?acl)", func() error {
			_, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: bucket, Key: key, ACL: s3types.ObjectCannedACLPublicRead})
			return err
		}, "no_matching_grant"},
		{"PutObject with x-amz-acl", func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, ACL: s3types.ObjectCannedACLPublicRead, Body: strings.NewReader("x")})
			return err
		}, "no_matching_grant"},
		{"PutObject with x-amz-grant-read", func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, GrantRead: aws.String(`uri="http://acs.amazonaws.com/groups/global/AllUsers"`), Body: strings.NewReader("x")})
			return err
		}, "no_matching_grant"},
		{"PutObjectRetention (?retention)", func() error {
			_, err := c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: bucket, Key: key,
				Retention: &s3types.ObjectLockRetention{Mode: s3types.ObjectLockRetentionModeCompliance, RetainUntilDate: &until}})
			return err
		}, "no_matching_grant"},
		{"PutObject with object-lock headers", func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, ObjectLockMode: s3types.ObjectLockModeCompliance,
				ObjectLockRetainUntilDate: &until, Body: strings.NewReader("x")})
			return err
		}, "no_matching_grant"},
		{"PutObjectLegalHold (?legal-hold)", func() error {
			_, err := c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: bucket, Key: key,
				LegalHold: &s3types.ObjectLockLegalHold{Status: s3types.ObjectLockLegalHoldStatusOn}})
			return err
		}, "no_matching_grant"},
		{"PutObject with a legal-hold header", func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, ObjectLockLegalHoldStatus: s3types.ObjectLockLegalHoldStatusOn, Body: strings.NewReader("x")})
			return err
		}, "no_matching_grant"},
		{"PutObjectTagging (?tagging)", func() error {
			_, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: bucket, Key: key, Tagging: &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("a"), Value: aws.String("b")}}}})
			return err
		}, "no_matching_grant"},
		{"PutObject with x-amz-tagging", func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, Tagging: aws.String("a=b"), Body: strings.NewReader("x")})
			return err
		}, "no_matching_grant"},
		{"RestoreObject (?restore)", func() error {
			_, err := c.RestoreObject(ctx, &s3.RestoreObjectInput{Bucket: bucket, Key: key, RestoreRequest: &s3types.RestoreRequest{Days: aws.Int32(1)}})
			return err
		}, "no_matching_grant"},
		{"CopyObject from a bucket outside the grant", func() error {
			_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: bucket, Key: aws.String("t-42/loot.csv"), CopySource: aws.String("secret/payroll.csv")})
			return err
		}, "no_matching_grant"},
		{"CopyObject of a version (needs s3:GetObjectVersion)", func() error {
			_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: bucket, Key: aws.String("t-42/old.csv"), CopySource: aws.String("reports/t-42/a.csv?versionId=1")})
			return err
		}, "no_matching_grant"},
		{"GetObject of a version (needs s3:GetObjectVersion)", func() error {
			_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: key, VersionId: aws.String("1")})
			return err
		}, "no_matching_grant"},
		{"DeleteObject", func() error {
			_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: bucket, Key: key})
			return err
		}, "no_matching_grant"},
	}
	for _, tt := range sdk {
		before := len(e.s3.received())
		err := tt.call()
		awsAtkRefused(t, tt.name, err, tt.code)
		awsAtkNothingSent(t, tt.name, e.s3.received(), before)
	}

	// Raw requests: sub-resources on the bucket that the ListBucket rule
	// (prefix t-42/) must not reach, and sub-resources nobody named.
	ep := e.b.Sandbox + "/v1/aws/s3"
	raw := []struct {
		name, method, url string
		header            http.Header
		status            int
		code              string
	}{
		{"GetBucketPolicy (?policy) dressed as a listing", "GET", ep + "/reports?policy&prefix=t-42/", nil, 403, "no_matching_grant"},
		{"PutBucketPolicy (?policy)", "PUT", ep + "/reports?policy", nil, 403, "no_matching_grant"},
		{"GetBucketAcl (?acl) dressed as a listing", "GET", ep + "/reports?acl&prefix=t-42/", nil, 403, "no_matching_grant"},
		{"PutBucketVersioning (?versioning)", "PUT", ep + "/reports?versioning&prefix=t-42/", nil, 403, "no_matching_grant"},
		{"PutPublicAccessBlock (?publicAccessBlock)", "PUT", ep + "/reports?publicAccessBlock", nil, 403, "no_matching_grant"},
		{"unknown sub-resource on an object", "PUT", ep + "/reports/t-42/a.csv?renameObject", nil, 400, "bad_request"},
		{"unknown sub-resource on the bucket", "GET", ep + "/reports?metadataTable&prefix=t-42/", nil, 400, "bad_request"},
		{"sub-resource in another case", "PUT", ep + "/reports/t-42/a.csv?ACL", nil, 400, "bad_request"},
		{"two sub-resources", "PUT", ep + "/reports/t-42/a.csv?uploads&acl", nil, 400, "bad_request"},
		{"a sub-resource twice", "PUT", ep + "/reports/t-42/a.csv?retention&retention", nil, 400, "bad_request"},
		{"a sub-resource with another method", "POST", ep + "/reports/t-42/a.csv?acl", nil, 400, "bad_request"},
		{"a copy source given twice", "PUT", ep + "/reports/t-42/b.csv", http.Header{"X-Amz-Copy-Source": {"reports/t-42/a.csv", "secret/payroll.csv"}}, 400, "bad_request"},
		{"a copy source key hidden behind an encoded ?", "PUT", ep + "/reports/t-42/b.csv", http.Header{"X-Amz-Copy-Source": {"reports/t-42/a%3F/../../../secret/payroll.csv"}}, 400, "bad_request"},
	}
	for _, tt := range raw {
		before := len(e.s3.received())
		r := e.send(t, "s3", tt.method, tt.url, tt.header, "")
		if r.Status != tt.status || r.Header.Get("X-Airlock-Code") != tt.code || !bytes.Contains(r.Body, []byte("<Error>")) {
			t.Errorf("%s: %d %s %s, want %d %s", tt.name, r.Status, r.Header.Get("X-Airlock-Code"), r.Body, tt.status, tt.code)
		}
		awsAtkNothingSent(t, tt.name, e.s3.received(), before)
	}

	// Only the allowed calls reached S3.
	if n := len(e.s3.received()); n != base {
		t.Errorf("%d refused requests reached S3", n-base)
	}
	// Every refusal is audited with its code.
	denied := 0
	for _, rec := range brokertest.ParseAudit(t, e.b.AuditExport()) {
		if rec.Type == "call.denied" {
			denied++
		}
	}
	if want := len(sdk) + len(raw); denied < want {
		t.Errorf("%d denials audited, want at least %d", denied, want)
	}
	brokertest.AssertNoCanary(t, "audit", e.b.AuditExport())
}

// TestAWSAttackDotSegmentKeys: an object key with "." or ".." segments, raw
// or percent-encoded (once or twice), or an empty segment, is refused; the
// upstream never sees it.
func TestAWSAttackDotSegmentKeys(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	ep := e.b.Sandbox + "/v1/aws/s3"
	for _, p := range []string{
		"/reports/t-42/../secret-plans.txt",
		"/reports/t-42/%2E%2E/t-43/x.txt",
		"/reports/t-42/%2e%2e/t-43/x.txt",
		"/reports/t-42%2F..%2Ft-43/x.txt",
		"/reports/t-42/%252E%252E/t-43/x.txt",
		"/reports/t-42/./x.txt",
		"/reports/t-42/.%2E/t-43/x.txt",
		`/reports/t-42/..%5Ct-43/x.txt`,
		"/reports/t-42//x.txt",
	} {
		before := len(e.s3.received())
		r := e.send(t, "s3", "PUT", ep+p, nil, "payload")
		if r.Status != 400 || r.Header.Get("X-Airlock-Code") != "bad_request" {
			t.Errorf("PUT %s: %d %s %s, want 400 bad_request", p, r.Status, r.Header.Get("X-Airlock-Code"), r.Body)
		}
		awsAtkNothingSent(t, "PUT "+p, e.s3.received(), before)
	}
}

// TestAWSAttackDotKeysOptIn: an upstream with allow_dot_keys: true lets such
// keys through (to the key the grant was checked on).
func TestAWSAttackDotKeysOptIn(t *testing.T) {
	f := awsAtkNewS3(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    allow_dot_keys: true
    endpoint: ` + f.URL + `
    credential: {source: env, access_key_name: REAL_AWS_KEY_ID, secret_key_name: REAL_AWS_SECRET}
`, Env: map[string]string{"REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container",
		"grants": []any{awsAtkPutOnlyGrant()}})
	var s struct {
		AWSCredentials struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 {
		t.Fatalf("session: %d %s", r.Status, r.Body)
	}
	e := &awsAtkEnv{b: b, s3: f, key: s.AWSCredentials.AccessKeyID, secret: s.AWSCredentials.SecretAccessKey}
	if r := e.send(t, "s3", "PUT", b.Sandbox+"/v1/aws/s3/reports/t-42/%2E%2E/x.txt", nil, "payload"); r.Status != 200 {
		t.Fatalf("a dot-segment key with allow_dot_keys: %d %s", r.Status, r.Body)
	}
	got := f.received()
	if len(got) != 1 || got[0].Path != "/reports/t-42/../x.txt" {
		t.Fatalf("the upstream got %+v, want the checked key t-42/../x.txt", got)
	}
}

// TestAWSAttackSentIsChecked: what S3 received is what was authorized. For
// every allowed call the upstream's decoded bucket/key is the one the grant
// was checked on (encoded slashes, double encoding, spaces, unicode), its
// query holds no sub-resource, no permission-changing header passed, and
// its path is the one the audit recorded as allowed.
func TestAWSAttackSentIsChecked(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	ep := e.b.Sandbox + "/v1/aws/s3"
	cases := []struct{ escaped, key string }{
		{"t-42/plain.txt", "t-42/plain.txt"},
		{"t-42/a%2Fb.txt", "t-42/a/b.txt"},        // an encoded slash is a slash to S3: checked as one
		{"t-42/a%252Fb.txt", "t-42/a%2Fb.txt"},    // double encoding: one level is decoded, as S3 does
		{"t-42/q%20r+s.txt", "t-42/q r+s.txt"},    // space and a literal plus
		{"t-42/%E2%82%AC.txt", "t-42/\u20ac.txt"}, // unicode
		{"t-42/dir/", "t-42/dir/"},                // a folder marker
	}
	for _, c := range cases {
		if r := e.send(t, "s3", "PUT", ep+"/reports/"+c.escaped, nil, "payload"); r.Status != 200 {
			t.Fatalf("PUT %s: %d %s", c.escaped, r.Status, r.Body)
		}
	}
	// The stock SDK, too: a key with characters it escapes.
	c := e.client(t)
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/sdk (1) & more.txt"), Body: strings.NewReader("x")}); err != nil {
		t.Fatalf("SDK PutObject: %v", err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/copy.txt"), CopySource: aws.String("reports/t-42/plain.txt"),
		MetadataDirective: s3types.MetadataDirectiveReplace, ContentType: aws.String("text/plain")}); err != nil {
		t.Fatalf("SDK CopyObject: %v", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("reports"), Prefix: aws.String("t-42/")}); err != nil {
		t.Fatalf("SDK ListObjectsV2: %v", err)
	}

	got := e.s3.received()
	if len(got) != len(cases)+3 {
		t.Fatalf("the upstream got %d requests, want %d", len(got), len(cases)+3)
	}
	for i, c := range cases {
		if got[i].Method != "PUT" || got[i].Path != "/reports/"+c.key {
			t.Errorf("sent %s %s (decoded %q), checked key %q", got[i].Method, got[i].RawPath, got[i].Path, c.key)
		}
	}
	subresources := []string{"acl", "policy", "retention", "legal-hold", "restore", "select", "tagging", "versioning", "versionId", "uploads", "uploadId", "torrent", "attributes"}
	var allowedPaths []string
	for _, rec := range brokertest.ParseAudit(t, e.b.AuditExport()) {
		if rec.Type == "call.allowed" {
			allowedPaths = append(allowedPaths, rec.Path)
		}
	}
	if len(allowedPaths) != len(got) {
		t.Fatalf("%d calls audited as allowed, %d reached S3", len(allowedPaths), len(got))
	}
	for i, rec := range got {
		switch {
		case rec.Method == "GET" && rec.Path == "/reports" || rec.Path == "/reports/":
			if p := rec.Query.Get("prefix"); !strings.HasPrefix(p, "t-42/") {
				t.Errorf("a listing outside the grant reached S3: prefix %q", p)
			}
		case rec.Method == "PUT" && strings.HasPrefix(rec.Path, "/reports/t-42/") && !strings.Contains(rec.Path, "/../"):
		default:
			t.Errorf("S3 got %s %s, which the grant does not allow", rec.Method, rec.Path)
		}
		for _, k := range subresources {
			if rec.Query.Has(k) {
				t.Errorf("S3 got %s %s with sub-resource ?%s", rec.Method, rec.RawPath, k)
			}
		}
		for h := range rec.Header {
			lh := strings.ToLower(h)
			if lh == "x-amz-acl" || strings.HasPrefix(lh, "x-amz-grant-") || strings.HasPrefix(lh, "x-amz-object-lock-") || lh == "x-amz-tagging" {
				t.Errorf("S3 got %s %s with header %s", rec.Method, rec.RawPath, h)
			}
		}
		if src := rec.Header.Get("X-Amz-Copy-Source"); src != "" && !strings.HasPrefix(strings.TrimPrefix(src, "/"), "reports/t-42/") {
			t.Errorf("S3 got a copy from %s", src)
		}
		if allowedPaths[i] != rec.RawPath {
			t.Errorf("audited %q as allowed, sent %q", allowedPaths[i], rec.RawPath)
		}
	}
}

// TestAWSAttackOperationSelectors: for the query and JSON protocols, an
// operation selector given twice or in two places, or not at all, is
// refused; the upstream never sees it.
func TestAWSAttackOperationSelectors(t *testing.T) {
	e := awsAtkStart(t,
		map[string]any{"upstream": "sqs", "rules": []any{map[string]any{"action": "sqs:List*", "resource": "*"}}},
		map[string]any{"upstream": "ddb", "rules": []any{map[string]any{"action": "dynamodb:GetItem", "resource": "*"}}},
	)
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=utf-8"}}
	target := func(ts ...string) http.Header {
		return http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amz-Target": ts}
	}
	sqs, ddb := e.b.Sandbox+"/v1/aws/sqs/", e.b.Sandbox+"/v1/aws/ddb/"

	// Allowed calls still work.
	if r := e.send(t, "sqs", "POST", sqs, form, "Action=ListQueues&Version=2012-11-05"); r.Status != 200 {
		t.Fatalf("ListQueues: %d %s", r.Status, r.Body)
	}
	if r := e.send(t, "dynamodb", "POST", ddb, target("DynamoDB_20120810.GetItem"), `{"TableName":"t"}`); r.Status != 200 {
		t.Fatalf("GetItem: %d %s", r.Status, r.Body)
	}
	base := len(e.other.Requests())

	attacks := []struct {
		name, service, url string
		header             http.Header
		body               string
	}{
		{"Action twice in the form", "sqs", sqs, form, "Action=ListQueues&Action=DeleteQueue&QueueUrl=q"},
		{"Action in the query and the form", "sqs", sqs + "?Action=ListQueues", form, "Action=DeleteQueue&QueueUrl=q"},
		{"Action twice in the query", "sqs", sqs + "?Action=ListQueues&Action=DeleteQueue", nil, ""},
		{"Action in two cases", "sqs", sqs, form, "Action=ListQueues&action=DeleteQueue"},
		{"no Action at all (sqs:Unknown matched sqs:List*? never)", "sqs", sqs, form, "QueueUrl=q"},
		{"a form without its Content-Type", "sqs", sqs + "?Action=ListQueues", nil, "Action=DeleteQueue&QueueUrl=q"},
		{"X-Amz-Target twice", "dynamodb", ddb, target("DynamoDB_20120810.GetItem", "DynamoDB_20120810.DeleteTable"), `{"TableName":"t"}`},
		{"X-Amz-Target and an Action", "dynamodb", ddb + "?Action=DeleteTable", target("DynamoDB_20120810.GetItem"), `{"TableName":"t"}`},
		{"no X-Amz-Target", "dynamodb", ddb, http.Header{"Content-Type": {"application/x-amz-json-1.0"}}, `{"TableName":"t"}`},
	}
	for _, tt := range attacks {
		r := e.send(t, tt.service, "POST", tt.url, tt.header, tt.body)
		if r.Status != 400 || r.Header.Get("X-Airlock-Code") != "bad_request" {
			t.Errorf("%s: %d %s %s, want 400 bad_request", tt.name, r.Status, r.Header.Get("X-Airlock-Code"), r.Body)
		}
	}
	if n := len(e.other.Requests()) - base; n != 0 {
		last := e.other.Last(t)
		t.Errorf("%d refused requests reached the upstream; last: %s %s %s", n, last.Method, last.RawQuery, last.Body)
	}
}

// TestAWSAttackNoSelectorWildcard: with a grant of sqs:*, a request that
// names no operation is refused rather than matched as "sqs:Unknown".
func TestAWSAttackNoSelectorWildcard(t *testing.T) {
	e := awsAtkStart(t, map[string]any{"upstream": "sqs", "rules": []any{map[string]any{"action": "sqs:*", "resource": "*"}}})
	r := e.send(t, "sqs", "POST", e.b.Sandbox+"/v1/aws/sqs/", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, "QueueUrl=q&Version=2012-11-05")
	if r.Status != 400 || r.Header.Get("X-Airlock-Code") != "bad_request" {
		t.Errorf("no operation under sqs:*: %d %s, want 400 bad_request", r.Status, r.Body)
	}
	if n := len(e.other.Requests()); n != 0 {
		t.Errorf("a request naming no operation reached the upstream")
	}
}

// TestAWSAttackImpliedPermissionConstraints: a permission a header implies
// is checked like any other, constraints included, on the request as it is
// sent; it counts no use of the grant (the call is one call).
func TestAWSAttackImpliedPermissionConstraints(t *testing.T) {
	e := awsAtkStart(t, map[string]any{"upstream": "s3", "max_uses": 2, "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*", "constraints": map[string]any{
			"header.x-amz-acl": map[string]any{"one_of": []any{"private", "bucket-owner-full-control"}}}},
	}})
	c := e.client(t)
	ctx := context.Background()
	put := func(key string, acl s3types.ObjectCannedACL) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String(key), ACL: acl, Body: strings.NewReader("x")})
		return err
	}
	err := put("t-42/public.csv", s3types.ObjectCannedACLPublicRead)
	awsAtkRefused(t, "a public-read ACL", err, "constraint_violated")
	if n := len(e.s3.received()); n != 0 {
		t.Fatalf("a refused ACL reached S3")
	}
	if err := put("t-42/private.csv", s3types.ObjectCannedACLPrivate); err != nil {
		t.Fatalf("a private ACL the grant allows: %v", err)
	}
	if got := e.s3.received(); len(got) != 1 || got[0].Header.Get("X-Amz-Acl") != "private" {
		t.Fatalf("S3 got %+v, want one PutObject with x-amz-acl: private", got)
	}
	// The ACL check took no use: one more call fits in max_uses 2, then none.
	if err := put("t-42/second.csv", ""); err != nil {
		t.Fatalf("the second call of max_uses 2: %v", err)
	}
	awsAtkRefused(t, "a third call of max_uses 2", put("t-42/third.csv", ""), "grant_exhausted")
}

// A grant that caps its uses can only cap what it counts: a header that
// needs its permission (x-amz-acl on a PutObject allowed by another grant)
// would not be counted by it, so it permits no such header at all, and the
// cap on ACL changes holds; its operation sent on its own is counted.
func TestAWSPermitGrantUsesNeverExceeded(t *testing.T) {
	put := map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	acl := map[string]any{"upstream": "s3", "max_uses": 1, "rules": []any{
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	e := awsAtkStart(t, put, acl)
	c := e.client(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a" + itoa(i)), ACL: s3types.ObjectCannedACLPublicRead, Body: strings.NewReader("x")})
		awsAtkRefused(t, "an ACL header permitted by a use-limited grant", err, "grant_exhausted")
	}
	awsAtkNothingSent(t, "an ACL header permitted by a use-limited grant", e.s3.received(), 0)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), ACL: s3types.ObjectCannedACLPublicRead}); err != nil {
		t.Fatalf("the ACL grant's one use, sent on its own: %v", err)
	}
	_, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), ACL: s3types.ObjectCannedACLPublicRead})
	awsAtkRefused(t, "a second direct ACL change", err, "grant_exhausted")
}

// Signed raw S3 requests that a PutObject/GetObject grant on
// reports/t-42/* must not turn into anything else. (Not attacks, so not
// listed: x-id naming another operation on a PUT, which S3 ignores;
// SelectObjectContent, which IAM authorizes as s3:GetObject; start-after
// under the constrained prefix, whose results stay under it.)
func TestAWSRawVariants(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	s3u := e.b.Sandbox + "/v1/aws/s3"
	multipart := "--XX\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nt-99/evil\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nx\r\n--XX--\r\n"
	cases := []struct {
		name, method, url string
		h                 http.Header
		body              string
	}{
		{"UploadPartCopy from an unreadable source", "PUT", s3u + "/reports/t-42/a?partNumber=1&uploadId=u1", http.Header{"X-Amz-Copy-Source": {"/secret/payroll.csv"}}, ""},
		{"UploadPartCopy with a range", "PUT", s3u + "/reports/t-42/a?partNumber=1&uploadId=u1", http.Header{"X-Amz-Copy-Source": {"secret/payroll.csv"}, "X-Amz-Copy-Source-Range": {"bytes=0-3"}}, ""},
		{"POST object form upload to another prefix", "POST", s3u + "/reports", http.Header{"Content-Type": {"multipart/form-data; boundary=XX"}}, multipart},
		{"POST object form upload on the key", "POST", s3u + "/reports/t-42/a", http.Header{"Content-Type": {"multipart/form-data; boundary=XX"}}, multipart},
		{"x-id twice", "GET", s3u + "/reports/t-42/a?x-id=GetObject&x-id=GetObjectAcl", nil, ""},
		{"uploads with acl", "POST", s3u + "/reports/t-42/a?uploads&acl", nil, ""},
		{"ACL upper case", "PUT", s3u + "/reports/t-42/a?ACL", nil, "x"},
		{"acl with a value", "PUT", s3u + "/reports/t-42/a?acl=1", nil, "x"},
		{"presigned query on top of a header signature", "GET", s3u + "/secret/payroll.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256", nil, ""},
		{"grant-full-control in odd case", "PUT", s3u + "/reports/t-42/a", http.Header{"x-AMZ-grant-FULL-control": {"id=evil"}}, "x"},
		{"object lock in odd case", "PUT", s3u + "/reports/t-42/a", http.Header{"X-AMZ-OBJECT-LOCK-LEGAL-HOLD": {"ON"}}, "x"},
		{"bucket in the host-style path segment", "GET", s3u + "/secret/payroll.csv", http.Header{"Host": {"reports.s3.amazonaws.com"}}, ""},
		{"DeleteObjects (POST ?delete)", "POST", s3u + "/reports?delete", http.Header{"Content-Type": {"application/xml"}}, `<Delete><Object><Key>t-42/a</Key></Object></Delete>`},
		{"restore", "POST", s3u + "/reports/t-42/a?restore", nil, ""},
		{"list another prefix via list-type=2", "GET", s3u + "/reports?list-type=2&prefix=t-99/", nil, ""},
		{"list with the prefix twice", "GET", s3u + "/reports?prefix=t-42/&prefix=t-99/", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(e.s3.received())
			r := e.send(t, "s3", c.method, c.url, c.h, c.body)
			got := e.s3.received()
			if len(got) != before {
				last := got[len(got)-1]
				t.Errorf("reached S3 (%d): %s %s?%s %v", r.Status, last.Method, last.RawPath, last.Query.Encode(), last.Header)
			}
		})
	}
}
