// Package upstream holds the APIs the broker reaches: their credential
// sources, how a credential is injected, the outbound call, and the
// scrubbing of answers.
package upstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// nowUTC is the signing clock.
func nowUTC() time.Time { return time.Now().UTC() }

// Errors of an outbound call.
var (
	ErrUpstream = errors.New("upstream error")
	ErrTimeout  = errors.New("upstream timeout")
)

// Injection says where the credential goes: a header with a format
// ("Bearer {secret}"), a query parameter, or HTTP basic auth (the secret is
// the password).
type Injection struct {
	Header    string
	Format    string
	Query     string
	BasicUser string
}

// DefaultForwardHeaders pass from the sandbox to every upstream.
var DefaultForwardHeaders = []string{"Accept", "Content-Type", "User-Agent", "Idempotency-Key"}

// Upstream is a configured API.
type Upstream struct {
	Name           string
	Kind           string // "http"
	BaseURL        *url.URL
	Sensitive      bool
	Timeout        time.Duration
	MaxBody        int64
	ForwardHeaders map[string]bool // canonical names
	Source         Source
	Inject         Injection
	AWS            *AWS // set for aws upstreams: requests are SigV4-signed instead of injected

	transport http.RoundTripper
	scrub     atomic.Pointer[scrubCache]
}

type scrubCache struct {
	secret   string
	scrubber *Scrubber
}

// NewTransport is the pooled HTTP transport of an upstream: no proxy from
// the environment, keep-alive connections reused across calls.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// SetTransport replaces the transport (tests, shared pools).
func (u *Upstream) SetTransport(rt http.RoundTripper) { u.transport = rt }

// Outbound is a checked request, ready to send.
type Outbound struct {
	Method string
	Path   string // canonical escaped path, appended to the base URL's path
	Query  string // re-encoded checked query
	Header http.Header
	Body   []byte
}

// Credential is what an upstream call needs: the secret (for AWS, the
// secret key, with the full key set in AWS) and the scrubber for every form
// of it that could come back.
type Credential struct {
	Secret Secret
	AWS    aws.Credentials
	Scrub  *Scrubber
}

// Credential fetches the credential, failing closed.
func (u *Upstream) Credential(ctx context.Context) (Credential, error) {
	var c Credential
	if u.AWS != nil {
		ac, err := u.AWS.Creds.Retrieve(ctx)
		if err != nil || ac.SecretAccessKey == "" {
			return c, fmt.Errorf("%w: %s", ErrCredentialUnavailable, u.Source.Describe())
		}
		c.AWS, c.Secret = ac, NewSecret(ac.SecretAccessKey)
	} else {
		sec, err := u.Source.Fetch(ctx)
		if err != nil {
			return c, err
		}
		if sec.IsZero() {
			return c, fmt.Errorf("%w: %s returned an empty secret", ErrCredentialUnavailable, u.Source.Describe())
		}
		c.Secret = sec
	}
	c.Scrub = u.scrubberFor(c)
	return c, nil
}

func (u *Upstream) scrubberFor(cred Credential) *Scrubber {
	sec := cred.Secret
	if c := u.scrub.Load(); c != nil && c.secret == sec.Reveal() {
		return c.scrubber
	}
	values := []string{sec.Reveal()}
	if cred.AWS.SessionToken != "" {
		values = append(values, cred.AWS.SessionToken)
	}
	if u.Inject.BasicUser != "" {
		values = append(values, base64.StdEncoding.EncodeToString([]byte(u.Inject.BasicUser+":"+sec.Reveal())))
	}
	if u.Inject.Header != "" && u.Inject.Format != "" {
		values = append(values, strings.ReplaceAll(u.Inject.Format, "{secret}", sec.Reveal()))
	}
	c := &scrubCache{secret: sec.Reveal(), scrubber: NewScrubber(values...)}
	u.scrub.Store(c)
	return c.scrubber
}

// CredentialPlaceholder stands for the credential in URL's answer.
const CredentialPlaceholder = "{credential}"

// URL is the full URL a request to path (canonical, escaped, below the
// base URL) with query (encoded) is sent to, as Do builds it: the base
// URL's scheme and host (for AWS, the configured or regional endpoint), its
// path joined with path, the query, and for an upstream that injects its
// credential as a query parameter that parameter with CredentialPlaceholder
// in place of the secret. Reviewers are shown this URL.
func (u *Upstream) URL(path, query string) string {
	return u.target(path, query, nil)
}

// target is the outbound URL with sec injected when the credential rides
// in the query (nil: CredentialPlaceholder).
func (u *Upstream) target(path, query string, sec *Secret) string {
	if u.Inject.Query != "" {
		if query != "" {
			query += "&"
		}
		cred := CredentialPlaceholder
		if sec != nil {
			cred = url.QueryEscape(sec.Reveal())
		}
		query += url.QueryEscape(u.Inject.Query) + "=" + cred
	}
	target := u.BaseURL.Scheme + "://" + u.BaseURL.Host + strings.TrimSuffix(u.BaseURL.EscapedPath(), "/") + path
	if query != "" {
		target += "?" + query
	}
	return target
}

// Do sends out with the credential injected. The response is the raw
// upstream response (the caller scrubs it with the returned Scrubber).
// Redirects are never followed.
func (u *Upstream) Do(ctx context.Context, out *Outbound, cred Credential) (*http.Response, error) {
	sec := cred.Secret
	target := u.target(out.Path, out.Query, &sec)
	var body io.Reader
	if out.Body != nil {
		body = bytes.NewReader(out.Body)
	}
	req, err := http.NewRequestWithContext(ctx, out.Method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%w: build request", ErrUpstream)
	}
	req.Header = out.Header
	switch {
	case u.AWS != nil:
		if err := u.signAWS(ctx, req, out.Body, cred.AWS); err != nil {
			return nil, fmt.Errorf("%w: signing failed", ErrUpstream)
		}
	case u.Inject.BasicUser != "":
		req.SetBasicAuth(u.Inject.BasicUser, sec.Reveal())
	case u.Inject.Header != "":
		req.Header.Set(u.Inject.Header, strings.ReplaceAll(u.Inject.Format, "{secret}", sec.Reveal()))
	}
	resp, err := u.transport.RoundTrip(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ErrTimeout
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, ErrTimeout
		}
		return nil, ErrUpstream
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: unsupported content encoding", ErrUpstream)
	}
	return resp, nil
}

// hopHeaders are never passed back to the sandbox.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Set-Cookie": true,
	"Content-Length": true, "Proxy-Connection": true,
}

// ResponseHeader copies an upstream's response headers for the sandbox:
// hop-by-hop headers, those named in Connection, and Set-Cookie dropped,
// every value scrubbed.
func ResponseHeader(dst, src http.Header, s *Scrubber) {
	named := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			named[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for k, vs := range src {
		if hopHeaders[k] || named[k] {
			continue
		}
		for _, v := range vs {
			dst.Add(k, s.String(v))
		}
	}
}
