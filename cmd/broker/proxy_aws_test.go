package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// AWS through the proxy door (DESIGN §8, issue 14): the stock SDK and CLI
// reach the real AWS host names (s3.us-east-1.amazonaws.com,
// reports.s3.us-east-1.amazonaws.com) with no endpoint override, through
// HTTPS_PROXY, trusting the session's CA (AWS_CA_BUNDLE), signing with the
// session's aws_credentials; the broker verifies, maps, re-signs for the
// configured endpoint (gofakes3 on loopback) and forwards. Nothing leaves
// loopback: the clients only ever dial the proxy.

// sandboxProxy is what a sandbox gets for proxy mode.
type sandboxProxy struct {
	ID, Token string
	ProxyURL  string // HTTPS_PROXY, with the token as the proxy password
	CAFile    string // the session's CA (AWS_CA_BUNDLE, GIT_SSL_CAINFO, ...)
	AccessKey string // aws_credentials, when a grant targets an aws upstream
	SecretKey string
}

// sandboxProxyFor creates a session and reads its proxy answer.
func sandboxProxyFor(t *testing.T, b *brokertest.Proc, req map[string]any) sandboxProxy {
	t.Helper()
	r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, req)
	var s struct {
		ID    string `json:"id"`
		Token string `json:"token"`
		Proxy *struct {
			URL   string `json:"url"`
			CAPEM string `json:"ca_pem"`
		} `json:"proxy"`
		AWS *struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil || r.Status != http.StatusCreated || s.Proxy == nil || s.Proxy.URL == "" || s.Proxy.CAPEM == "" {
		t.Fatalf("proxy session: %d %s", r.Status, r.Body)
	}
	ps := sandboxProxy{ID: s.ID, Token: s.Token, ProxyURL: s.Proxy.URL, CAFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(ps.CAFile, []byte(s.Proxy.CAPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.AWS != nil {
		ps.AccessKey, ps.SecretKey = s.AWS.AccessKeyID, s.AWS.SecretAccessKey
	}
	return ps
}

// proxyS3Broker starts a broker with the proxy door and an S3 upstream
// (us-east-1, its endpoint gofakes3 on loopback, no hosts: the AWS names
// by default).
func proxyS3Broker(t *testing.T) (*brokertest.Proc, *fakeS3) {
	t.Helper()
	f := newFakeS3(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: ` + f.URL + `
    credential: {source: env, access_key_name: REAL_AWS_KEY_ID, secret_key_name: REAL_AWS_SECRET}
proxy_listen: 127.0.0.1:0
`, Env: map[string]string{"REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	return b, f
}

// s3Grant allows objects under reports/t-42/ and listing that prefix.
func s3Grant() map[string]any {
	return map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:*Object", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:ListBucket", "resource": "arn:aws:s3:::reports", "constraints": map[string]any{
			"query.prefix": map[string]any{"pattern": "t-42/.*", "required": true}}},
	}}
}

// proxyS3Client is the stock SDK as a sandbox configures it for proxy mode:
// region and the session's aws_credentials, HTTPS_PROXY for its transport
// and AWS_CA_BUNDLE for its roots, and no endpoint. (http.ProxyFromEnvironment
// reads the environment once per process, so the proxy is given to the
// SDK's own buildable client instead of through t.Setenv.)
func proxyS3Client(t *testing.T, ps sandboxProxy, accessKey, secretKey string, hosts *hostLog, opts ...func(*s3.Options)) *s3.Client {
	t.Helper()
	pu, err := url.Parse(ps.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.Proxy = func(r *http.Request) (*url.URL, error) {
			if hosts != nil {
				hosts.add(canonicalAddr(r.URL))
			}
			return pu, nil
		}
	})
	ca, err := os.Open(ps.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(),
		awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")),
		awsconfig.WithHTTPClient(hc),
		awsconfig.WithCustomCABundle(ca), // what AWS_CA_BUNDLE sets
		awsconfig.WithSharedConfigFiles([]string{}), awsconfig.WithSharedCredentialsFiles([]string{}),
		awsconfig.WithEC2IMDSClientEnableState(1), // disabled
		awsconfig.WithRetryMaxAttempts(1),
	)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BaseEndpoint != nil {
		t.Fatalf("an endpoint is configured (%s): the test must reach the real AWS names", *cfg.BaseEndpoint)
	}
	return s3.NewFromConfig(cfg, opts...)
}

// hostLog records the destinations a client asked its proxy for.
type hostLog struct {
	mu    sync.Mutex
	hosts []string
}

func (h *hostLog) add(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, s)
}

func (h *hostLog) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

// canonicalAddr is host:port of a URL, the port defaulting by scheme.
func canonicalAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Hostname() + ":443"
	}
	return u.Hostname() + ":80"
}

// TestProxyAWSSDK: the stock SDK, through HTTPS_PROXY only, puts and gets
// an object in the grant, by virtual-hosted names (its default) and by
// path; outside the grant it gets S3's AccessDenied, which never reaches
// S3; a signature of another session, or with a guessed secret, is refused.
func TestProxyAWSSDK(t *testing.T) {
	b, f := proxyS3Broker(t)
	ps := sandboxProxyFor(t, b, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container", "grants": []any{s3Grant()}})
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		pathStyle bool
		key       string
		host      string // the AWS name the SDK reaches
	}{
		{"virtual-hosted", false, "t-42/a.csv", "reports.s3.us-east-1.amazonaws.com:443"},
		{"path-style", true, "t-42/b.csv", "s3.us-east-1.amazonaws.com:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hosts hostLog
			c := proxyS3Client(t, ps, ps.AccessKey, ps.SecretKey, &hosts, func(o *s3.Options) { o.UsePathStyle = tc.pathStyle })
			body := "id,total\n1,42\n" + tc.key
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String(tc.key), Body: strings.NewReader(body)}); err != nil {
				t.Fatalf("PutObject inside the grant: %v", err)
			}
			obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String(tc.key)})
			if err != nil {
				t.Fatalf("GetObject: %v", err)
			}
			data, _ := io.ReadAll(obj.Body)
			obj.Body.Close()
			brokertest.AssertNoCanary(t, "object", data)
			if string(data) != body {
				t.Fatalf("object = %q, want %q", data, body)
			}
			list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("reports"), Prefix: aws.String("t-42/")})
			if err != nil || len(list.Contents) == 0 {
				t.Fatalf("ListObjectsV2 in the prefix: %v %v", list, err)
			}
			if got := hosts.get(); len(got) == 0 || got[0] != tc.host || got[len(got)-1] != tc.host {
				t.Errorf("the SDK reached %v through the proxy, want %s", got, tc.host)
			}

			// Outside the grant: S3's AccessDenied, with the Airlock code; S3 never sees it.
			f.mu.Lock()
			before := len(f.auths)
			f.mu.Unlock()
			var denied []error
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-43/x"), Body: strings.NewReader("x")})
			denied = append(denied, err)
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("archive"), Key: aws.String("t-42/x"), Body: strings.NewReader("x")})
			denied = append(denied, err)
			_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("reports")})
			denied = append(denied, err)
			for i, err := range denied {
				var ae smithy.APIError
				if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" || !strings.Contains(ae.ErrorMessage(), "airlock ") {
					t.Errorf("denied call %d: %v", i, err)
				}
			}
			f.mu.Lock()
			after := len(f.auths)
			f.mu.Unlock()
			if after != before {
				t.Errorf("%d refused calls reached S3", after-before)
			}
		})
	}

	// A guessed secret, and another session's aws_credentials through this
	// session's proxy token: the signature is refused.
	other := sandboxProxyFor(t, b, map[string]any{"task_id": "t-99", "untrusted_input": false, "isolation": "container", "grants": []any{s3Grant()}})
	for name, keys := range map[string][2]string{
		"guessed secret":        {ps.AccessKey, "guessed"},
		"other session's creds": {other.AccessKey, other.SecretKey},
	} {
		c := proxyS3Client(t, ps, keys[0], keys[1], nil)
		_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv")})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" {
			t.Errorf("%s: %v, want SignatureDoesNotMatch", name, err)
		}
	}

	// S3 saw the broker's real key, re-signed for its endpoint; the
	// sandbox never had it.
	f.mu.Lock()
	for _, a := range f.auths {
		if !strings.Contains(a, "Credential=AKIAREALKEY0000/") {
			t.Errorf("S3 got %q", a)
		}
	}
	f.mu.Unlock()
	// The audit names the path-style request the grant checked.
	audit := b.AuditExport()
	brokertest.AssertNoCanary(t, "audit", audit)
	found := false
	for _, rec := range brokertest.ParseAudit(t, audit) {
		if rec.Decision == "allow" && rec.Path == "/reports/t-42/a.csv" {
			found = true
		}
	}
	if !found {
		t.Errorf("no allowed audit record for /reports/t-42/a.csv:\n%s", audit)
	}
}

// TestProxyAWSCLI: the stock AWS CLI with only HTTPS_PROXY, AWS_CA_BUNDLE,
// the region and the session's aws_credentials.
func TestProxyAWSCLI(t *testing.T) {
	awsCLI := brokertest.RequireTool(t, "aws", "apt-get install -y awscli")
	b, f := proxyS3Broker(t)
	ps := sandboxProxyFor(t, b, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container", "grants": []any{s3Grant()}})
	home := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"HTTPS_PROXY=" + ps.ProxyURL, "AWS_CA_BUNDLE=" + ps.CAFile,
		"AWS_ACCESS_KEY_ID=" + ps.AccessKey, "AWS_SECRET_ACCESS_KEY=" + ps.SecretKey,
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none"),
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=",
	}
	if p := os.Getenv("PYENV_ROOT"); p != "" { // a pyenv shim (dev machines) needs its root
		env = append(env, "PYENV_ROOT="+p)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(awsCLI, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		brokertest.AssertNoCanary(t, "aws cli output", out)
		return string(out), err
	}
	awsCLIRoundTrip(t, run, func(copyOut func()) {
		f.mu.Lock()
		before := len(f.auths)
		f.mu.Unlock()
		copyOut()
		f.mu.Lock()
		defer f.mu.Unlock()
		if n := len(f.auths) - before; n != 0 {
			t.Errorf("%d refused calls reached S3", n)
		}
	})
}

// TestProxyAWSHostileHosts: names the SDK never builds. A bucket label
// that is not a DNS-compatible bucket name passes the one-label wildcard
// of egress but is refused in S3's protocol; names outside the upstream's
// (another region, a dotted label, a suffix appended) are refused at
// CONNECT. S3 sees none of them.
func TestProxyAWSHostileHosts(t *testing.T) {
	b, f := proxyS3Broker(t)
	ps := sandboxProxyFor(t, b, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container", "grants": []any{s3Grant()}})
	pu, _ := url.Parse(ps.ProxyURL)
	pem, _ := os.ReadFile(ps.CAFile)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	send := func(host string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest("PUT", "https://"+host+"/t-42/x.txt", strings.NewReader("x"))
		sum := sha256.Sum256([]byte("x"))
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
		if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: ps.AccessKey, SecretAccessKey: ps.SecretKey}, req, hash, "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data, nil
	}
	// The control: a valid virtual-hosted name is served.
	if resp, body, err := send("reports.s3.us-east-1.amazonaws.com"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a valid virtual-hosted PUT: %v %v %s", err, resp, body)
	}
	f.mu.Lock()
	before := len(f.auths)
	f.mu.Unlock()
	for _, host := range []string{"ab.s3.us-east-1.amazonaws.com", "xn--rports-8ua.s3.us-east-1.amazonaws.com"} {
		resp, body, err := send(host)
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		if resp.StatusCode != 400 || !strings.Contains(string(body), "<Code>InvalidRequest</Code>") || resp.Header.Get("X-Airlock-Code") != "bad_request" {
			t.Errorf("%s: %d %s, want S3's 400 InvalidRequest", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{"reports.s3.eu-west-1.amazonaws.com", "evil.com.s3.amazonaws.com", "reports.s3.us-east-1.amazonaws.com.attacker.test", "s3.amazonaws.com.attacker.test", "reports-.s3.us-east-1.amazonaws.com"} {
		if _, _, err := send(host); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("%s: CONNECT answered %v, want 403 egress_denied", host, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.auths) - before; n != 0 {
		t.Errorf("%d refused requests reached S3", n)
	}
}
