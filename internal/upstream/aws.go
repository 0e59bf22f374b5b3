package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
)

// AWS is what an aws upstream adds: the service and region it signs for
// and where the real credentials come from.
type AWS struct {
	Service string // s3, dynamodb, sqs, ...
	Region  string
	Creds   AWSCredentialsProvider
	// AllowDotKeys lets object keys (and, outside S3, paths) hold "." and
	// ".." segments and empty segments ("a//b"), raw or percent-encoded.
	// Off by default: an upstream or a proxy in front of it may resolve
	// them, so the key it reads is not the key the grant was checked on.
	AllowDotKeys bool
}

// S3 reports whether the upstream speaks S3's REST protocol.
func (a *AWS) S3() bool { return a.Service == "s3" }

// AWSCredentials are an AWS key set: an access key, its secret and, for
// temporary credentials, the session token. (The SDK's aws.Credentials,
// field for field, without the SDK: internal/upstream/awscred converts.)
type AWSCredentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Source          string // where they came from, for operators
	CanExpire       bool
	Expires         time.Time
}

// AWSCredentialsProvider yields an aws upstream's real credentials: keys
// from the environment (StaticAWSCredentials), from Vault
// (internal/upstream/vault), the SDK's default chain or an assumed role
// (internal/upstream/awscred). Retrieve may be called for every request:
// a provider caches what is costly to get.
type AWSCredentialsProvider interface {
	Retrieve(ctx context.Context) (AWSCredentials, error)
}

// StaticAWSCredentials are keys read once (env).
func StaticAWSCredentials(accessKey, secretKey string) AWSCredentialsProvider {
	return staticAWS{AWSCredentials{AccessKeyID: accessKey, SecretAccessKey: secretKey, Source: "static"}}
}

type staticAWS struct{ c AWSCredentials }

func (s staticAWS) Retrieve(context.Context) (AWSCredentials, error) { return s.c, nil }

// MinSTSDuration is STS's shortest session: a temporary AWS credential is
// never asked for less.
const MinSTSDuration = 15 * time.Minute

// awsSource adapts an AWS credentials provider to the Source contract (the
// secret key is the secret; the rest rides in Credential.AWS).
type awsSource struct {
	p    AWSCredentialsProvider
	desc string
}

func (s awsSource) Fetch(ctx context.Context) (Secret, error) {
	c, err := s.p.Retrieve(ctx)
	if err != nil || c.SecretAccessKey == "" {
		return Secret{}, fmt.Errorf("%s: %w", s.desc, errNoAWSCredentials)
	}
	return NewSecret(c.SecretAccessKey), nil
}

func (s awsSource) Describe() string { return s.desc }

// AWSSource wraps a provider as a Source (readiness, contract).
func AWSSource(p AWSCredentialsProvider, desc string) Source { return awsSource{p: p, desc: desc} }

// signAWS signs req for the upstream with the real credentials (signV4).
func (u *Upstream) signAWS(req *http.Request, body []byte, c AWSCredentials) {
	signV4(req, sha256Hex(body), c, u.AWS.Service, u.AWS.Region, u.AWS.S3(), nowUTC())
}

// ErrAWSOperation is an AWS request whose operation the broker cannot name
// exactly (an unknown S3 sub-resource or parameter, a selector given twice
// or not at all, a key with dot segments): it is refused before any grant
// is consulted, never mapped to a neighbouring operation.
var ErrAWSOperation = fmt.Errorf("%w: AWS operation", grants.ErrBadRequest)

func opErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrAWSOperation}, args...)...)
}

// AWSRequest is what Operation reads of a verified SigV4 request.
type AWSRequest struct {
	Method string
	Path   string      // the decoded path below the upstream's prefix: /bucket/key for S3 (path style)
	Query  url.Values  // the parsed query
	Header http.Header // as the sandbox sent it (and as it is forwarded)
	Form   url.Values  // a form-encoded body (query protocol), or nil
	Body   []byte
}

// Op is an AWS request named as IAM names it: the action and resource the
// call is, the further permissions it needs (Also: a copy's source, a
// header that sets an ACL, a lock or tags), and the path to send: built
// from the checked bucket and key, so the upstream reads what was checked.
type Op struct {
	Action   string
	Resource string
	Also     []Permission
	SendPath string // escaped; "" keeps the path as received (non-S3)
}

// Permission is one further action a request needs, and what in the
// request implies it.
type Permission struct {
	Action   string
	Resource string
	Because  string // e.g. "header x-amz-acl"
}

// Operation names an AWS request: S3's REST API by method, path, every
// sub-resource query key and the headers that change what an operation
// does; JSON-protocol services by their one X-Amz-Target; query-protocol
// services by their one Action. Anything it cannot name exactly is an
// ErrAWSOperation.
func (a *AWS) Operation(r AWSRequest) (Op, error) {
	if a.S3() {
		return a.s3Operation(r)
	}
	// JSON- and query-protocol requests are addressed to "/" and name their
	// operation in a selector. A path could name another operation to a
	// service that routes by path (REST and rpc-v2 protocols: Lambda's
	// /functions/{f}/invocations, /service/{s}/operation/{op}), which then
	// ignores the selector that was checked: refused.
	if r.Path != "/" {
		return Op{}, opErr("requests to " + a.Service + " are sent to / (an operation is named by X-Amz-Target or Action, never by the path)")
	}
	if r.Header.Get("Smithy-Protocol") != "" {
		return Op{}, opErr("the Smithy RPC v2 protocol names its operation in the path: not supported")
	}
	var sel []string
	for _, t := range r.Header.Values("X-Amz-Target") {
		_, op, ok := strings.Cut(t, ".")
		if !ok {
			return Op{}, opErr("X-Amz-Target names no operation")
		}
		sel = append(sel, op)
	}
	for _, vs := range []url.Values{r.Query, r.Form} {
		for k, v := range vs {
			if strings.EqualFold(k, "Action") {
				sel = append(sel, v...)
			}
		}
	}
	switch {
	case len(sel) == 0:
		return Op{}, opErr("no operation selector (X-Amz-Target or Action)")
	case len(sel) > 1:
		return Op{}, opErr("the operation selector (X-Amz-Target or Action) is given more than once")
	case !validOpName(sel[0]):
		return Op{}, opErr("the operation selector is not an operation name")
	}
	return Op{Action: a.Service + ":" + sel[0], Resource: "*"}, nil
}

// validOpName: AWS operation names are ASCII letters and digits.
func validOpName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
