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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// nowUTC is the signing clock of outbound SigV4 requests. It stays the
// wall clock: the time is for the upstream (AWS), which checks it against
// its own, and decides no expiry in the broker.
func nowUTC() time.Time { return time.Now().UTC() }

// Errors of an outbound call.
var (
	ErrUpstream = fault.Hidden(fault.UpstreamError, "upstream error")
	ErrTimeout  = fault.Hidden(fault.UpstreamTimeout, "upstream timeout")
)

// Injection says where the credential goes: a header with a format
// ("Bearer {secret}"), a query parameter, HTTP basic auth (the secret is
// the password), or a request signature keyed by the secret (HMAC; the
// secret itself is not sent).
type Injection struct {
	Header    string
	Format    string
	Query     string
	BasicUser string
	HMAC      *HMACSigning
}

// DefaultForwardHeaders pass from the sandbox to every upstream.
var DefaultForwardHeaders = []string{"Accept", "Content-Type", "User-Agent", "Idempotency-Key"}

// Upstream is a configured API.
type Upstream struct {
	Name           string
	Kind           string // "http", "aws" or "mcp"
	BaseURL        *url.URL
	Sensitive      bool
	Timeout        time.Duration
	MaxBody        int64
	ForwardHeaders map[string]bool // canonical names
	Source         Source
	// Minter, when set, mints the credential per session (mint.go); Source
	// is then MintedSource(Minter).
	Minter Minter
	Inject Injection
	// Placeholder is the worthless token sandbox clients get in its
	// variable (proxy door), or nil.
	Placeholder *Placeholder
	AWS         *AWS // set for aws upstreams: requests are SigV4-signed instead of injected
	// RotationGrace is how long a credential replaced by rotation is still
	// scrubbed from answers (0: not at all).
	RotationGrace time.Duration
	// Clock is the clock of the rotation grace (nil: time.Now).
	Clock func() time.Time
	// Secrets, when set, is the broker's set of every secret it holds: the
	// credential's values (and those rotated out within the grace) are
	// kept there under "upstream/"+Name, and the scrubber of a credential is
	// the set's, so that an answer of this upstream is scrubbed of every
	// other secret too. Nil: the scrubber knows only this upstream's values.
	Secrets *Secrets

	// AllowPathSemicolons lets path segments carry ";" (grants.PathOptions).
	AllowPathSemicolons bool

	// Hosts are the destinations the proxy door maps to this upstream
	// (DESIGN §8); none: not reachable through the proxy door.
	Hosts []Host

	// PropagateTrace sends the broker's own trace context (traceparent of
	// the upstream call's span) to this upstream; off by default.
	PropagateTrace bool

	Tools map[string]string // mcp: tool name → pinned digest from config

	transport http.RoundTripper
	scrub     atomic.Pointer[scrubCache]
	scrubMu   sync.Mutex // serializes rebuilding the scrubber
}

// DefaultRotationGrace is the default of RotationGrace in configuration.
const DefaultRotationGrace = 24 * time.Hour

// maxRetired bounds how many replaced credentials are kept for scrubbing;
// past it the oldest is dropped even within its grace.
const maxRetired = 16

type scrubKey struct{ secret, sessionToken string }

type scrubCache struct {
	key      scrubKey
	values   []string // the current credential's values
	header   string   // the injected header's value with the current credential (Inject.Format), or ""
	retired  []retiredValues
	expires  time.Time // when the first retired credential leaves (zero: none)
	scrubber *Scrubber
}

// retiredValues are the values of a credential replaced by rotation,
// scrubbed until until.
type retiredValues struct {
	key    scrubKey
	values []string
	until  time.Time
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
	AWS    AWSCredentials
	Scrub  *Scrubber
}

// Causes of a credential not had.
var (
	errMintedPerSession = Unavailable("the credential is minted per session", nil)
	errNoAWSCredentials = Unavailable("the AWS credentials are unavailable", nil)
	errEmptySecret      = Unavailable("the credential source returned an empty secret", nil)
)

// Credential fetches the credential, failing closed. Its error says the
// cause (fault.CauseOf): the source's, or a generic one.
func (u *Upstream) Credential(ctx context.Context) (Credential, error) {
	var c Credential
	if u.Minter != nil {
		return c, fmt.Errorf("%s: %w", u.Minter.Describe(), errMintedPerSession)
	}
	if u.AWS != nil {
		ac, err := u.AWS.Creds.Retrieve(ctx)
		if err != nil || ac.SecretAccessKey == "" {
			return c, fmt.Errorf("%s: %w", u.Source.Describe(), errNoAWSCredentials)
		}
		c.AWS, c.Secret = ac, NewSecret(ac.SecretAccessKey)
	} else {
		sec, err := u.Source.Fetch(ctx)
		if err != nil {
			// A source's error that says no cause says the generic one.
			if fault.CauseOf(err) == "" {
				return c, fmt.Errorf("%s: %w", u.Source.Describe(), CredentialFailed(err, "the credential source failed"))
			}
			return c, err
		}
		if sec.IsZero() {
			return c, fmt.Errorf("%s: %w", u.Source.Describe(), errEmptySecret)
		}
		c.Secret = sec
	}
	c.Scrub = u.scrubberFor(c)
	return c, nil
}

func (u *Upstream) now() time.Time {
	if u.Clock != nil {
		return u.Clock()
	}
	return time.Now()
}

// scrubberFor returns the scrubber of cred's values and of the credentials
// it replaced within their rotation grace. It is rebuilt only when the
// credential changes or a retired one's grace ends.
func (u *Upstream) scrubberFor(cred Credential) *Scrubber {
	// The other values derive from these two.
	key := scrubKey{cred.Secret.Reveal(), cred.AWS.SessionToken}
	fresh := func(c *scrubCache) bool {
		return c != nil && c.key == key && (c.expires.IsZero() || u.now().Before(c.expires))
	}
	if c := u.scrub.Load(); fresh(c) {
		return c.scrubber
	}
	u.scrubMu.Lock()
	defer u.scrubMu.Unlock()
	old := u.scrub.Load()
	if fresh(old) {
		return old.scrubber
	}
	now := u.now()
	values := u.scrubValues(cred)
	next := &scrubCache{key: key, values: values}
	if u.Inject.Header != "" && u.Inject.Format != "" && u.AWS == nil {
		next.header = strings.ReplaceAll(u.Inject.Format, "{secret}", cred.Secret.Reveal())
	}
	if old != nil {
		if old.key != key && u.RotationGrace > 0 {
			next.retired = append(next.retired, retiredValues{key: old.key, values: old.values, until: now.Add(u.RotationGrace)})
		}
		for _, r := range old.retired {
			if now.Before(r.until) && r.key != key && len(next.retired) < maxRetired && !slices.ContainsFunc(next.retired, func(x retiredValues) bool { return x.key == r.key }) {
				next.retired = append(next.retired, r)
			}
		}
	}
	all := append([]string(nil), values...)
	for _, r := range next.retired {
		all = append(all, r.values...)
		if next.expires.IsZero() || r.until.Before(next.expires) {
			next.expires = r.until
		}
	}
	if u.Secrets != nil {
		u.Secrets.Set("upstream/"+u.Name, all...)
		next.scrubber = u.Secrets.Scrubber()
	} else {
		next.scrubber = NewScrubber(all...)
	}
	u.scrub.Store(next)
	return next.scrubber
}

// scrubValues are the values of cred that an answer must not carry: the
// secret and what was sent derived from it.
func (u *Upstream) scrubValues(cred Credential) []string {
	sec := cred.Secret
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
	return values
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

// Do sends out with the credential injected. The response is the
// upstream's, its body decoded (see decodeResponse); the caller scrubs it
// with the credential's Scrubber. Redirects are never followed. A failed
// round trip is a fault.Cause of ErrUpstream, or of ErrTimeout, that says
// what failed in a fixed phrase (see NetCause); the error's own text, which
// names the host and could carry the URL, is never shown.
func (u *Upstream) Do(ctx context.Context, out *Outbound, cred Credential) (*http.Response, error) {
	sec := cred.Secret
	target := u.target(out.Path, out.Query, &sec)
	var body io.Reader
	if out.Body != nil {
		body = bytes.NewReader(out.Body)
	}
	rt := &roundTrip{} // how far the round trip got: what a timeout waited for
	req, err := http.NewRequestWithContext(rt.watch(ctx), out.Method, target, body)
	if err != nil {
		return nil, errUnbuildableRequest
	}
	req.Header = out.Header
	switch {
	case u.AWS != nil:
		u.signAWS(req, out.Body, cred.AWS)
	case u.Inject.HMAC != nil:
		req.Header.Set(u.Inject.HMAC.Header, u.Inject.HMAC.Sign(sec, SignedRequest{
			// What goes on the wire: the request line's path and query.
			Method: req.Method, Host: req.URL.Host, Path: req.URL.EscapedPath(), Query: req.URL.RawQuery,
			Body: out.Body, Time: nowUTC(),
		}))
	case u.Inject.BasicUser != "":
		req.SetBasicAuth(u.Inject.BasicUser, sec.Reveal())
	case u.Inject.Header != "":
		req.Header.Set(u.Inject.Header, u.injectedHeader(sec))
	}
	// Asked for explicitly (after signing, as the transport would), gzip is
	// decoded here, where every coding of the answer is seen, and never by
	// the transport, which decodes one and drops the header naming others.
	if req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == "" && req.Method != http.MethodHead {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := u.transport.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ctx.Err() // the caller left, or a kill cut the call: not the upstream's failure
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = errors.Join(err, context.DeadlineExceeded) // the upstream's timeout, whatever the transport said
		}
		return nil, failed(err, rt.phase())
	}
	if err := decodeResponse(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// injectedHeader is the value of the injected header carrying sec
// (Inject.Format with the secret in): the scrubber's cache holds it while
// sec is its current credential, else it is formatted anew.
func (u *Upstream) injectedHeader(sec Secret) string {
	if c := u.scrub.Load(); c != nil && c.header != "" && c.key.secret == sec.Reveal() {
		return c.header
	}
	return strings.ReplaceAll(u.Inject.Format, "{secret}", sec.Reveal())
}

// hopHeaders are never passed back to the sandbox: hop-by-hop headers,
// cookies (an upstream session the credential opened is the credential's
// equal), X-Airlock-Code (it marks the broker's own refusals: an upstream
// may not forge one), X-Airlock-Request-Id (the broker's own, set on
// every answer) and X-Airlock-Action-Id (it marks the broker's pending
// answer to a gated call).
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Set-Cookie": true,
	"Set-Cookie2":    true, // RFC 2965, still honoured by Java's CookieManager
	"Content-Length": true, "Proxy-Connection": true, "X-Airlock-Code": true, "X-Airlock-Request-Id": true, "X-Airlock-Action-Id": true,
}

// ResponseHeader copies an upstream's response headers for the sandbox:
// hop-by-hop headers, those named in Connection, Set-Cookie and every header
// whose name carries a secret (in any form and ASCII case) dropped, every
// value scrubbed.
func ResponseHeader(dst, src http.Header, s *Scrubber) {
	named := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			named[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	n := 0
	for _, vs := range src {
		n += len(vs)
	}
	vals := make([]string, 0, n) // one array for every value passed on
	for k, vs := range src {
		if hopHeaders[k] || named[k] || s.NameHasSecret(k) {
			continue
		}
		ck := http.CanonicalHeaderKey(k)
		if _, had := dst[ck]; had {
			for _, v := range vs {
				dst.Add(ck, s.String(v))
			}
			continue
		}
		i := len(vals)
		for _, v := range vs {
			vals = append(vals, s.String(v))
		}
		if len(vals) > i {
			dst[ck] = vals[i:len(vals):len(vals)] // capped: an Add to it copies, never writes the next header's values
		}
	}
}
