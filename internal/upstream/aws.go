package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// AWS is what an aws upstream adds: the service and region it signs for
// and where the real credentials come from.
type AWS struct {
	Service string // s3, dynamodb, sqs, ...
	Region  string
	Creds   aws.CredentialsProvider
}

// S3 reports whether the upstream speaks S3's REST protocol.
func (a *AWS) S3() bool { return a.Service == "s3" }

// StaticAWSCredentials are keys read once (env).
func StaticAWSCredentials(accessKey, secretKey string) aws.CredentialsProvider {
	return aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""))
}

// DefaultAWSCredentials is the SDK's default chain (environment, shared
// files, container and instance roles). Nothing is contacted until the
// first call.
func DefaultAWSCredentials(ctx context.Context, region string) (aws.CredentialsProvider, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("aws default credentials: %w", err)
	}
	return cfg.Credentials, nil
}

// AssumeRole assumes roleARN through STS with base credentials (any
// source: the default chain, keys from Vault or the environment); the
// temporary keys are cached and refreshed before they expire.
// endpoint overrides STS's (a VPC endpoint), or "".
func AssumeRole(base aws.CredentialsProvider, region, roleARN, endpoint string) aws.CredentialsProvider {
	opts := sts.Options{Region: region, Credentials: base}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	client := sts.New(opts)
	return aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(client, roleARN, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = "airlock-broker"
	}))
}

// VaultAWSCredentials reads static keys from two fields of a KV v2 secret.
type VaultAWSCredentials struct{ Access, Secret *VaultKV }

// Retrieve implements aws.CredentialsProvider.
func (v VaultAWSCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	ak, err := v.Access.Fetch(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	sk, err := v.Secret.Fetch(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	return aws.Credentials{AccessKeyID: ak.Reveal(), SecretAccessKey: sk.Reveal(), Source: "vault"}, nil
}

// sourceOf adapts an AWS credentials provider to the Source contract (the
// secret key is the secret; the rest rides in Credential.AWS).
type awsSource struct {
	p    aws.CredentialsProvider
	desc string
}

func (s awsSource) Fetch(ctx context.Context) (Secret, error) {
	c, err := s.p.Retrieve(ctx)
	if err != nil || c.SecretAccessKey == "" {
		return Secret{}, fmt.Errorf("%w: %s", ErrCredentialUnavailable, s.desc)
	}
	return NewSecret(c.SecretAccessKey), nil
}

func (s awsSource) Describe() string { return s.desc }

// AWSSource wraps a provider as a Source (readiness, contract).
func AWSSource(p aws.CredentialsProvider, desc string) Source { return awsSource{p: p, desc: desc} }

// signAWS signs req for the upstream with the real credentials.
func (u *Upstream) signAWS(ctx context.Context, req *http.Request, body []byte, c aws.Credentials) error {
	hash := sha256Hex(body)
	req.Header.Set("X-Amz-Content-Sha256", hash)
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = u.AWS.S3() })
	return signer.SignHTTP(ctx, c, req, hash, u.AWS.Service, u.AWS.Region, nowUTC())
}

// Operation maps an AWS request to an IAM action and resource ARN: S3's
// REST API by method, path and sub-resource; JSON-protocol services by
// X-Amz-Target; query-protocol services by Action. bucket and key are
// decoded (S3, path style).
func (a *AWS) Operation(method, bucket, key string, q url.Values, h http.Header, form url.Values) (action, resource string) {
	if !a.S3() {
		if t := h.Get("X-Amz-Target"); t != "" {
			_, op, _ := strings.Cut(t, ".")
			return a.Service + ":" + op, "*"
		}
		if op := q.Get("Action"); op != "" {
			return a.Service + ":" + op, "*"
		}
		if op := form.Get("Action"); op != "" {
			return a.Service + ":" + op, "*"
		}
		return a.Service + ":Unknown", "*"
	}
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch {
	case bucket == "":
		return "s3:ListAllMyBuckets", "*"
	case key == "":
		arn := "arn:aws:s3:::" + bucket
		switch {
		case method == http.MethodPost && has("delete"):
			return "s3:DeleteObject", arn + "/*"
		case has("uploads"):
			return "s3:ListBucketMultipartUploads", arn
		case has("location"):
			return "s3:GetBucketLocation", arn
		case has("versions"):
			return "s3:ListBucketVersions", arn
		case method == http.MethodPut:
			return "s3:CreateBucket", arn
		case method == http.MethodDelete:
			return "s3:DeleteBucket", arn
		}
		return "s3:ListBucket", arn
	}
	arn := "arn:aws:s3:::" + bucket + "/" + key
	switch {
	case has("tagging") && method == http.MethodGet:
		return "s3:GetObjectTagging", arn
	case has("tagging"):
		return "s3:PutObjectTagging", arn
	case has("uploadId") && method == http.MethodDelete:
		return "s3:AbortMultipartUpload", arn
	case has("uploadId") && method == http.MethodGet:
		return "s3:ListMultipartUploadParts", arn
	case method == http.MethodGet || method == http.MethodHead:
		return "s3:GetObject", arn
	case method == http.MethodDelete:
		return "s3:DeleteObject", arn
	}
	// PUT (object, copy, upload part) and POST (create, complete multipart upload).
	return "s3:PutObject", arn
}
