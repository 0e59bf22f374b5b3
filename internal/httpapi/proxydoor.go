package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// The HTTPS_PROXY door (DESIGN §8): stock clients reach upstreams by their
// real host names through the broker as their egress proxy. It is a third
// listener on the sandbox plane and only translates its protocol into the
// call pipeline (broker.Do, broker.Open) and the outcome back:
//
//	CONNECT host:port + Proxy-Authorization   Admit, Egress (the destination
//	                                          names an upstream the session holds a grant on)
//	TLS with the session CA's leaf for host   SNI must be the CONNECT host
//	each request inside the tunnel            Admit again, Host must be the CONNECT host,
//	                                          then the REST door's steps
//	GET http://host/... (absolute form)       Admit, Egress, the REST door's steps
//
// Inner connections are served by one shared http.Server fed by a channel
// listener; each connection carries its tunnel (token, source, destination).

// ProxyOptions configure the proxy door.
type ProxyOptions struct {
	// Wait is how long a gated call holds the client's connection for the
	// decision (approval.proxy_wait); then 202 pending.
	Wait time.Duration
	// MaxTunnels bounds the tunnels one session holds open at once
	// (proxy_max_tunnels; 0: 256). Each holds a connection, a goroutine
	// and its TLS state for as long as the client keeps it: without a
	// bound one sandbox could take every file descriptor of the broker.
	MaxTunnels int
}

// ProxyDoor is the proxy door's two HTTP servers: the outer one on the
// listener (CONNECT and plain-HTTP requests) and the inner one serving the
// requests inside every TLS tunnel.
type ProxyDoor struct {
	s     *Server
	wait  time.Duration
	outer *http.Server
	inner *http.Server
	conns *connQueue
	log   *slog.Logger

	maxTunnels int
	tunnelsMu  sync.Mutex
	tunnels    map[string]int // session id → tunnels open (handshake included)

	ctx    context.Context // ends when the door shuts down: handshakes stop
	cancel context.CancelFunc
}

// Errors of the proxy door.
var (
	errProxyAuth        = fault.New(fault.ProxyAuthRequired, "proxy authentication required: Proxy-Authorization: Basic with the session token as the password")
	errNotProxyRequest  = fmt.Errorf("%w: this is the broker's proxy door: send CONNECT host:443 or an absolute-form http:// request", grants.ErrBadRequest)
	errProxyScheme      = fmt.Errorf("%w: only http:// requests (and CONNECT for https) go through the proxy door", grants.ErrBadRequest)
	errHostMismatch     = fault.New(fault.Misdirected, "bad request: the request's Host is not the host the tunnel was opened to")
	errSNIMismatch      = errors.New("the TLS server name is not the CONNECT host")
	errTooManyTunnels   = fmt.Errorf("%w: the session holds as many tunnels open as proxy_max_tunnels allows; reuse or close one", broker.ErrRateLimited)
	proxyHandshakeLimit = 10 * time.Second
)

// NewProxyDoor makes the proxy door over the server's broker.
func (s *Server) NewProxyDoor(o ProxyOptions) *ProxyDoor {
	ctx, cancel := context.WithCancel(context.Background())
	p := &ProxyDoor{s: s, wait: o.Wait, log: s.log.With("door", "proxy"), ctx: ctx, cancel: cancel,
		maxTunnels: o.MaxTunnels, tunnels: map[string]int{}}
	if p.maxTunnels <= 0 {
		p.maxTunnels = 256
	}
	p.conns = newConnQueue()
	p.outer = &http.Server{Handler: s.recoverer(s.idleBodies(http.HandlerFunc(p.serveOuter))), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	p.inner = &http.Server{
		Handler: s.recoverer(s.idleBodies(http.HandlerFunc(p.serveTunneled))), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tunnelConn); ok {
				return context.WithValue(ctx, tunnelKey{}, tc.t)
			}
			return ctx
		},
	}
	return p
}

// Serve serves the door on ln until Shutdown.
func (p *ProxyDoor) Serve(ln net.Listener) error {
	p.conns.addr = ln.Addr()
	errc := make(chan error, 1)
	go func() { errc <- p.inner.Serve(p.conns) }()
	err := p.outer.Serve(ln)
	p.conns.Close()
	ierr := <-errc
	for _, e := range []*error{&err, &ierr} {
		if errors.Is(*e, http.ErrServerClosed) || errors.Is(*e, net.ErrClosed) {
			*e = nil
		}
	}
	return errors.Join(err, ierr)
}

// Shutdown stops accepting, ends handshakes in progress, and waits for
// the requests in flight (inside tunnels too) until ctx ends.
func (p *ProxyDoor) Shutdown(ctx context.Context) error {
	p.cancel()
	err := p.outer.Shutdown(ctx)
	return errors.Join(err, p.inner.Shutdown(ctx))
}

// tunnel is what an inner connection carries: who opened it, from where, to where.
type tunnel struct {
	token  string
	remote netip.Addr
	dest   broker.Destination
	// authority is dest as a Host header names it with its port
	// ("api.example.com:8443"): hostMatches compares it without parsing.
	authority string
}

func newTunnel(token string, remote netip.Addr, dest broker.Destination) *tunnel {
	return &tunnel{token: token, remote: remote, dest: dest, authority: dest.String()}
}

type tunnelKey struct{}

// tunnelConn is an inner connection (TLS, handshake done) with its tunnel.
// Closing it frees the session's place (see openTunnel).
type tunnelConn struct {
	net.Conn
	t       *tunnel
	release func()
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// claimTunnel takes one of the session's places for a tunnel; the func
// frees it (once, whoever calls it). ok is false when the session holds
// maxTunnels already.
func (p *ProxyDoor) claimTunnel(sessionID string) (release func(), ok bool) {
	p.tunnelsMu.Lock()
	defer p.tunnelsMu.Unlock()
	if p.tunnels[sessionID] >= p.maxTunnels {
		return nil, false
	}
	p.tunnels[sessionID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.tunnelsMu.Lock()
			defer p.tunnelsMu.Unlock()
			if p.tunnels[sessionID]--; p.tunnels[sessionID] <= 0 {
				delete(p.tunnels, sessionID)
			}
		})
	}, true
}

// serveOuter serves the proxy listener: CONNECT opens a tunnel, an
// absolute-form http:// request is a call, anything else is refused.
func (p *ProxyDoor) serveOuter(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs():
		p.plain(w, r)
	default:
		writeProblem(w, problemFor(errNotProxyRequest), "")
	}
}

// proxyToken is the session token of Proxy-Authorization: Basic (any user
// name, the token as the password). A repeated header is refused: which one
// would be meant?
func proxyToken(r *http.Request) (string, bool) {
	vs := r.Header.Values("Proxy-Authorization")
	if len(vs) != 1 {
		return "", false
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(vs[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", false
	}
	_, tok, ok := strings.Cut(string(raw), ":")
	if !ok || tok == "" {
		return "", false
	}
	return tok, true
}

// writeProxyProblem writes a refusal on the proxy listener: a refused proxy
// authentication (a token the REST door would answer 401) is 407 with
// Proxy-Authenticate, as HTTP proxies answer.
func writeProxyProblem(w http.ResponseWriter, p Problem, requestID string) {
	if p.Status == http.StatusUnauthorized {
		p.Status = http.StatusProxyAuthRequired
		w.Header().Set("Proxy-Authenticate", `Basic realm="airlock"`)
	}
	writeProblem(w, p, requestID)
}

// proxyInbound is a call on the proxy listener, its caller admitted by
// the Proxy-Authorization token, to the destination the request names.
func proxyInbound(r *http.Request, tunnel bool) (broker.Inbound, string) {
	host, port, _ := proxyTarget(r)
	in := broker.Inbound{Method: r.Method, Egress: &broker.Egress{Host: host, Port: port, Tunnel: tunnel}}
	tok, ok := proxyToken(r)
	if ok {
		in.Caller = broker.BearerCaller(tok, remoteAddr(r))
	} else {
		in.Refused = errProxyAuth
	}
	return in, tok
}

// proxyTarget is the destination a CONNECT or absolute-form request names
// (the port defaults to 80 for http://); ok false when there is none.
func proxyTarget(r *http.Request) (host string, port int, ok bool) {
	authority, def := r.URL.Host, 80
	if r.Method == http.MethodConnect {
		authority, def = r.RequestURI, 0
	}
	h, ps, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || strings.Contains(authority, ":") && !strings.HasPrefix(authority, "[") {
			return authority, 0, authority != ""
		}
		return strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), def, authority != ""
	}
	n, err := strconv.Atoi(ps)
	if err != nil || strconv.Itoa(n) != ps {
		return h, 0, true
	}
	return h, n, true
}

// connect is CONNECT host:port: admit, check the destination, answer 200,
// terminate TLS with a leaf of the session's CA, and hand the connection to
// the inner server.
func (p *ProxyDoor) connect(w http.ResponseWriter, r *http.Request) {
	in, tok := proxyInbound(r, true)
	answered := false // the connection was taken over (or answered): a refusal is recorded, not written
	p.s.b.Open(r.Context(), in, func(a *broker.Admitted) error {
		return p.openTunnel(w, r, a, tok, &answered)
	}, func(o *broker.Outcome) {
		if !answered {
			w.Header().Set("X-Airlock-Request-Id", o.RequestID)
			writeProxyProblem(w, problemFor(o.Err), o.RequestID)
		}
	})
}

// openTunnel opens the admitted tunnel: one of its session's tunnel slots,
// 200, the TLS handshake with a leaf of the session's CA for the CONNECT
// host (the client's server name must be it), then the connection to the
// inner server. An error is a refusal for the pipeline to record.
func (p *ProxyDoor) openTunnel(w http.ResponseWriter, r *http.Request, a *broker.Admitted, tok string, answered *bool) error {
	dest, sessionID := a.Destination(), a.SessionID()
	release, ok := p.claimTunnel(sessionID)
	if !ok {
		return errTooManyTunnels
	}
	handedOver := false
	defer func() {
		if !handedOver {
			release()
		}
	}()
	*answered = true
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.log.Error("proxy door: hijack failed", "err", err)
		writeProblem(w, problemFor(errors.New("hijack")), a.RequestID())
		return nil
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\nX-Airlock-Request-Id: "+a.RequestID()+"\r\n\r\n"); err != nil {
		conn.Close()
		return nil
	}
	var raw net.Conn = conn
	if n := brw.Reader.Buffered(); n > 0 { // the client's hello, sent without waiting for the 200
		raw = &prereadConn{Conn: conn, r: io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)}
	}
	tlsConn := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: innerProtos, // h2 is not offered: the inner server speaks HTTP/1.1
		// No session tickets: a tunnel's config is its own, so a ticket
		// could never be redeemed (only minted, sealed and sent, on every
		// handshake), and a resumed handshake would skip GetCertificate,
		// where the SNI is checked against the CONNECT host.
		SessionTicketsDisabled: true,
		// Full-size records from the first byte: the client is a sandbox
		// next to the broker, not a browser across the Internet, and small
		// first records only cost one write each.
		DynamicRecordSizingDisabled: true,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !serverNameMatches(hello.ServerName, dest) {
				return nil, errSNIMismatch
			}
			return p.s.b.ProxyLeaf(sessionID, dest.Host)
		},
	})
	ctx, cancel := context.WithTimeout(p.ctx, proxyHandshakeLimit)
	err = tlsConn.HandshakeContext(ctx)
	cancel()
	if err != nil {
		tlsConn.Close()
		if errors.Is(err, errSNIMismatch) {
			// An attack or a confused client: recorded like a refused destination.
			return fmt.Errorf("%w: %w", broker.ErrEgressDenied, errSNIMismatch)
		}
		p.log.Info("proxy door: TLS handshake failed", "request_id", a.RequestID(), "session_id", sessionID, "destination", dest.String(), "err", err)
		return nil
	}
	handedOver = true
	if !p.conns.push(&tunnelConn{Conn: tlsConn, t: newTunnel(tok, remoteAddr(r), dest), release: release}) {
		tlsConn.Close()
		release()
	}
	return nil
}

// innerProtos is the ALPN the door offers inside a tunnel.
var innerProtos = []string{"http/1.1"}

// serverNameMatches: the TLS server name must be the CONNECT host. A client
// sends none for an IP address (RFC 6066), so none is accepted only then.
func serverNameMatches(sni string, d broker.Destination) bool {
	if sni == "" {
		_, err := netip.ParseAddr(d.Host)
		return err == nil
	}
	name, _, err := upstream.CanonicalHost(sni)
	return err == nil && name == d.Host
}

// hostMatches: a request inside a tunnel must name the tunnel's host (and
// its port, which may be left out when it is 443). It runs on every
// request in the tunnel: the forms clients send (the CONNECT host as it
// was canonicalized, with or without the port) match by comparison alone;
// anything else (upper case, a trailing dot, brackets) is parsed.
func hostMatches(hostHeader string, t *tunnel) bool {
	d := t.dest
	if hostHeader == t.authority || hostHeader == d.Host && d.Port == 443 {
		return true
	}
	h, port := hostHeader, 443
	if sh, ps, err := net.SplitHostPort(hostHeader); err == nil {
		n, err := strconv.Atoi(ps)
		if err != nil || strconv.Itoa(n) != ps {
			return false
		}
		h, port = sh, n
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	name, _, err := upstream.CanonicalHost(h)
	return err == nil && name == d.Host && port == d.Port
}

// serveTunneled serves one request inside a tunnel: admitted again (a
// session killed mid-tunnel stops here), for the tunnel's host only.
func (p *ProxyDoor) serveTunneled(w http.ResponseWriter, r *http.Request) {
	t, _ := r.Context().Value(tunnelKey{}).(*tunnel)
	if t == nil {
		writeProblem(w, problemFor(errNotProxyRequest), "")
		return
	}
	in := broker.Inbound{Upstream: t.dest.Upstream, Method: r.Method, Caller: broker.BearerCaller(t.token, t.remote), Wait: p.wait}
	c := p.newCall(w, r)
	defer c.stop()
	c.tunnel = true
	in.Parse = func(a *broker.Admitted) (*broker.Request, error) {
		c.admitted = true
		if !hostMatches(r.Host, t) {
			return nil, errHostMismatch
		}
		return c.parse(a, r.URL.EscapedPath())
	}
	p.s.b.Do(c.ctx, in, c.write)
	c.out.end()
}

// plain is an absolute-form http:// request on the proxy listener: the
// same destination check as CONNECT, then the call.
func (p *ProxyDoor) plain(w http.ResponseWriter, r *http.Request) {
	in, _ := proxyInbound(r, false)
	in.Wait = p.wait
	c := p.newCall(w, r)
	defer c.stop()
	in.Check = func() error {
		c.admitted = true
		if r.URL.Scheme != "http" {
			return errProxyScheme
		}
		return nil
	}
	in.Parse = func(a *broker.Admitted) (*broker.Request, error) { return c.parse(a, r.URL.EscapedPath()) }
	p.s.b.Do(c.ctx, in, c.write)
	c.out.end()
}

// proxyCall is one call on the proxy door: its parse and its writer.
type proxyCall struct {
	p        *ProxyDoor
	w        http.ResponseWriter
	r        *http.Request
	out      outcomeWriter
	tunnel   bool               // a request inside a tunnel (else a plain http:// one)
	admitted bool               // the caller was admitted: the token still holds
	aws      *upstream.Upstream // the call is an AWS upstream's: errors in its protocol
	mcp      *mcpExchange       // the call is an MCP upstream's: read and answered as the MCP door does
	ctx      context.Context    // the call's context (cancelled by an MCP client's notifications/cancelled)
	stop     context.CancelFunc
}

func (p *ProxyDoor) newCall(w http.ResponseWriter, r *http.Request) *proxyCall {
	c := &proxyCall{p: p, w: w, r: r}
	c.ctx, c.stop = context.WithCancel(r.Context())
	c.out = p.s.outcomes(w, r, c.problem)
	return c
}

// problem writes a refusal: in the AWS protocol for an AWS upstream's
// call, else as the proxy door does. A refusal of the tunnel's token (or
// of a request for another host) ends the tunnel's connection; a plain
// request whose proxy token is refused is answered 407, as HTTP proxies
// answer it.
func (c *proxyCall) problem(w http.ResponseWriter, err error, requestID string) {
	switch {
	case c.tunnel && (!c.admitted || errors.Is(err, errHostMismatch)):
		w.Header().Set("Connection", "close")
	case !c.tunnel && !c.admitted:
		writeProxyProblem(w, problemFor(err), requestID)
		return
	}
	if c.aws != nil {
		writeAWSError(w, c.aws, problemFor(err), requestID)
		return
	}
	writeProblem(w, problemFor(err), requestID)
}

func (c *proxyCall) write(o *broker.Outcome) broker.Written {
	if c.mcp != nil && c.admitted && (o.Err == nil || fault.Of(o.Err) != fault.InvalidToken) {
		defer c.mcp.stop()
		return c.mcp.write(o)
	}
	return c.out.write(o)
}

// parse reads an admitted call to its upstream: the sandbox's
// Authorization (a placeholder) and Proxy-Authorization are dropped, and
// the request is read as the REST door reads it, or for an AWS upstream
// as the AWS door does.
func (c *proxyCall) parse(a *broker.Admitted, escapedPath string) (*broker.Request, error) {
	r, u := c.r, a.Upstream()
	if !slices.Contains(proxyMethods, r.Method) { // CONNECT inside a tunnel, TRACE, ...: as the REST door
		return nil, errMethod
	}
	r.Header.Del("Proxy-Authorization")
	if u.AWS != nil {
		if _, err := upgradeRequest(r); err != nil || r.Header.Get("Upgrade") != "" {
			return nil, errUpgrade
		}
		// Authorization is the SDK's SigV4 signature, verified (never
		// forwarded: the pipeline signs anew).
		c.aws = u
		a.SetWait(awsWait(r))
		return readProxyAWS(r, a, u)
	}
	r.Header.Del("Authorization")
	if u.Kind == "mcp" {
		// An MCP client at the server's real URL: the MCP door's checks,
		// its wait for a human, its answers.
		if escapedPath != u.BaseURL.EscapedPath() && !(escapedPath == "/" && u.BaseURL.EscapedPath() == "") {
			return nil, errNotFoundRoute
		}
		c.mcp = &mcpExchange{s: c.p.s, w: c.w, r: r, cancel: c.stop}
		a.SetWait(c.p.s.mcpWait)
		return c.mcp.parse(a)
	}
	return readREST(c.w, r, a, escapedPath)
}

// readProxyAWS reads an AWS upstream's call through the proxy door: the
// stock SDK or CLI reaching the real AWS host name (no endpoint override),
// signing for it with the session's aws_credentials. The call, admitted by
// the proxy token, is read as the AWS door reads it (readAWS): the
// signature verifies against the host and path the client signed and must
// be the admitted session's; the operation map sees the path-style request
// (a virtual-hosted bucket moves from the host into the path); the broker
// signs anew for the configured endpoint.
func readProxyAWS(r *http.Request, a *broker.Admitted, u *upstream.Upstream) (*broker.Request, error) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	name, _, err := upstream.CanonicalHost(host)
	rest := ""
	if err == nil {
		rest, err = u.AWS.PathStyle(name, r.URL.EscapedPath())
		if err != nil && exactHost(u, name) {
			// A name the operator listed (hosts:) that is not one of
			// AWS's: addressed path-style.
			rest, err = r.URL.EscapedPath(), nil
		}
	}
	if err != nil {
		return nil, err
	}
	sig, err := upstream.ParseSigV4(r)
	if err != nil {
		return nil, errors.Join(errAWSSignature, err)
	}
	if sig.AccessKey != a.SessionID() {
		return nil, errors.Join(errAWSSignature, errAWSOtherSession)
	}
	return readAWS(r, a, sig, rest)
}

// errAWSOtherSession: the proxy token names one session, the signature's
// access key another.
var errAWSOtherSession = errors.New("the request is signed with another session's aws_credentials than the proxy's token")

// exactHost reports whether the upstream's hosts list name itself, not
// by a wildcard.
func exactHost(u *upstream.Upstream, name string) bool {
	for _, h := range u.Hosts {
		if !h.Wildcard && h.Name == name {
			return true
		}
	}
	return false
}

// prereadConn is a hijacked connection whose first bytes were already read
// into the server's buffer.
type prereadConn struct {
	net.Conn
	r io.Reader
}

func (c *prereadConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// connQueue is the inner server's listener: the connections the outer
// server's CONNECTs hand over.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr {
	if q.addr == nil {
		return &net.TCPAddr{}
	}
	return q.addr
}

// push hands a connection to the inner server; false once it is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}
