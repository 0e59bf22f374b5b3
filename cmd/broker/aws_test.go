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
	"os"
	"os/exec"
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

const awsCanary = "CANARY-aws-secret-key-0123456789abcdef"

// fakeS3 is an S3 upstream on loopback (gofakes3) that records the
// Authorization headers it received.
type fakeS3 struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newFakeS3(t *testing.T) *fakeS3 {
	backend := s3mem.New()
	if err := backend.CreateBucket("reports"); err != nil {
		t.Fatal(err)
	}
	f := &fakeS3{}
	h := gofakes3.New(backend).Server()
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auths = append(f.auths, r.Header.Get("Authorization"))
		f.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// awsSession starts a broker with an S3 upstream and a session whose grant
// covers reports/t-42/; it returns the sandbox's environment.
func awsSession(t *testing.T) (*brokertest.Proc, *fakeS3, map[string]string) {
	t.Helper()
	f := newFakeS3(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: ` + f.URL + `
    credential: {source: env, access_key_name: REAL_AWS_KEY_ID, secret_key_name: REAL_AWS_SECRET}
`, Env: map[string]string{"REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container",
		"grants": []any{map[string]any{"upstream": "s3", "rules": []any{
			map[string]any{"action": "s3:*Object", "resource": "arn:aws:s3:::reports/t-42/*"},
			map[string]any{"action": "s3:ListBucket", "resource": "arn:aws:s3:::reports", "constraints": map[string]any{
				"query.prefix": map[string]any{"pattern": "t-42/.*", "required": true}}},
		}}}})
	var s struct {
		ID             string `json:"id"`
		AWSCredentials struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != 201 || s.AWSCredentials.SecretAccessKey == "" {
		t.Fatalf("aws session: %d %s", r.Status, r.Body)
	}
	env := map[string]string{
		"AWS_ENDPOINT_URL": b.Sandbox + "/v1/aws/s3", "AWS_ACCESS_KEY_ID": s.AWSCredentials.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": s.AWSCredentials.SecretAccessKey, "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED": "true",
	}
	return b, f, env
}

func TestAWSSDKThroughBroker(t *testing.T) {
	b, f, env := awsSession(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	// The stock SDK, configured only through the environment.
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := s3.NewFromConfig(cfg)
	ctx := context.Background()
	var got []string
	capture := func(what string, body io.Reader) {
		data, _ := io.ReadAll(body)
		got = append(got, string(data))
		brokertest.AssertNoCanary(t, what, data)
	}

	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv"), Body: strings.NewReader("id,total\n1,42\n")}); err != nil {
		t.Fatalf("PutObject inside the grant: %v", err)
	}
	obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	capture("object", obj.Body)
	if got[0] != "id,total\n1,42\n" {
		t.Fatalf("object = %q", got[0])
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("reports"), Prefix: aws.String("t-42/")})
	if err != nil || len(list.Contents) != 1 {
		t.Fatalf("ListObjectsV2 in the prefix: %v %v", list, err)
	}
	// Multipart inside the prefix.
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("reports"), Key: aws.String("t-42/big.bin")})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	part := bytes.Repeat([]byte("x"), 5<<20)
	pr, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("reports"), Key: aws.String("t-42/big.bin"), UploadId: mp.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(part)})
	if err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("reports"), Key: aws.String("t-42/big.bin"), UploadId: mp.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: pr.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/big.bin")})
	if err != nil || aws.ToInt64(head.ContentLength) != int64(len(part)) {
		t.Fatalf("the multipart object: %v %v", head, err)
	}

	// Outside the grant: a clear AccessDenied carrying the Airlock code.
	denied := []error{}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-43/x"), Body: strings.NewReader("x")})
	denied = append(denied, err)
	_, err = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("reports"), Prefix: aws.String("t-43/")})
	denied = append(denied, err)
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("reports")})
	denied = append(denied, err)
	for i, err := range denied {
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" || !strings.Contains(ae.ErrorMessage(), "airlock ") {
			t.Errorf("denied call %d: %v", i, err)
		}
	}

	// A wrong secret: the signature does not verify.
	bad := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.Credentials = aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: "guessed"}, nil
		}))
	})
	_, err = bad.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" {
		t.Fatalf("a tampered signature: %v", err)
	}

	// The upstream saw the real key, re-signed; the sandbox never had it.
	f.mu.Lock()
	for _, a := range f.auths {
		if !strings.Contains(a, "Credential=AKIAREALKEY0000/") {
			t.Fatalf("upstream got %q", a)
		}
	}
	f.mu.Unlock()
	brokertest.AssertNoCanary(t, "audit", b.AuditExport())
}

func TestAWSCLIThroughBroker(t *testing.T) {
	awsCLI := brokertest.RequireTool(t, "aws", "apt-get install -y awscli")
	_, _, env := awsSession(t)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(awsCLI, append([]string{"--endpoint-url", env["AWS_ENDPOINT_URL"]}, args...)...)
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		brokertest.AssertNoCanary(t, "aws cli output", out)
		return string(out), err
	}
	awsCLIRoundTrip(t, run, nil)
}

// awsCLIRoundTrip has the AWS CLI copy a file into the grant's prefix and
// back, then to a prefix outside the grant (AccessDenied). refused runs
// around the refused copy (nil: nothing to check).
func awsCLIRoundTrip(t *testing.T, run func(args ...string) (string, error), refused func(copy func())) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "report.txt")
	_ = os.WriteFile(src, []byte("quarterly numbers\n"), 0o600)
	if out, err := run("s3", "cp", src, "s3://reports/t-42/report.txt"); err != nil {
		t.Fatalf("aws s3 cp into the grant: %v\n%s", err, out)
	}
	if out, err := run("s3", "cp", "s3://reports/t-42/report.txt", "-"); err != nil || out != "quarterly numbers\n" {
		t.Fatalf("aws s3 cp back: %v\n%s", err, out)
	}
	copyOut := func() {
		out, err := run("s3", "cp", src, "s3://reports/t-43/report.txt")
		if err == nil || !strings.Contains(out, "AccessDenied") {
			t.Fatalf("aws s3 cp outside the grant: %v\n%s", err, out)
		}
	}
	if refused == nil {
		copyOut()
		return
	}
	refused(copyOut)
}

// TestAWSSignedBodyMustMatch: a sandbox cannot sign one body and send
// another, nor sign as a session it does not hold.
func TestAWSSignedBodyMustMatch(t *testing.T) {
	b, f, env := awsSession(t)
	send := func(accessKey, secret, signedBody, sentBody string) brokertest.Response {
		req, _ := http.NewRequest("PUT", env["AWS_ENDPOINT_URL"]+"/reports/t-42/x.txt", strings.NewReader(signedBody))
		sum := sha256.Sum256([]byte(signedBody))
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secret}, req, hash, "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		req.Body = io.NopCloser(strings.NewReader(sentBody))
		req.ContentLength = int64(len(sentBody))
		resp, err := b.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return brokertest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	}
	f.mu.Lock()
	before := len(f.auths)
	f.mu.Unlock()
	if r := send(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], "approved", "approved"); r.Status != 200 {
		t.Fatalf("a correctly signed PUT: %d %s", r.Status, r.Body)
	}
	for name, r := range map[string]brokertest.Response{
		"swapped body":    send(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], "approved", "evil!!!!"),
		"unknown session": send("ses_nope", env["AWS_SECRET_ACCESS_KEY"], "x", "x"),
		"other secret":    send(env["AWS_ACCESS_KEY_ID"], "guessed", "x", "x"),
	} {
		if r.Status != 403 && r.Status != 401 || !bytes.Contains(r.Body, []byte("<Error>")) || r.Header.Get("X-Airlock-Code") == "" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.auths) - before; n != 1 {
		t.Fatalf("%d requests reached S3, want only the correctly signed one", n)
	}
}
