// Package broker wires sessions, grants, upstreams, API tokens and the audit
// chain into the broker's operations. It serves the hot path (token →
// session → grants) from memory and writes every change through to the store.
package broker

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Errors of broker operations (besides those of session, grants, upstream, audit).
var (
	ErrKillswitch      = fault.New(fault.KillswitchEngaged, "global kill-switch engaged")
	ErrNotFound        = fault.Hidden(fault.NotFound, "not found")
	ErrForbidden       = fault.New(fault.Forbidden, "forbidden")
	ErrConflict        = fault.New(fault.Conflict, "conflict")
	ErrUnknownUpstream = fault.New(fault.NotFound, "unknown upstream")
)

// Options configure a Broker.
type Options struct {
	// Store, when set, is a convenience: it fills every port below left nil.
	// Without it each port is required.
	Store            store.Store
	Sessions         SessionStore         // sessions and grants (default Store)
	Audit            AuditStore           // the audit chain and its index by session (default Store)
	Actions          approval.ActionStore // actions awaiting or after approval (default Store)
	Tokens           TokenStore           // API tokens' digests (default Store)
	Killswitch       KillswitchStore      // the kill-switch's durable state (default Store)
	Meta             MetaStore            // the installation secret (default Store)
	Health           HealthCheck          // the storage's readiness, reported by Ready as "store" (default Store)
	Usage            UsageStore           // counts grants' limits when the store is shared (default Store's, if it has one; nil: in memory)
	Upstreams        map[string]*upstream.Upstream
	AdminToken       string
	MaxSessionTTL    time.Duration
	DefaultTTL       time.Duration
	EnforceIsolation bool
	ApprovalTTL      time.Duration // how long a pending action waits (default 15m)
	MaxPending       int           // pending actions per session (default DefaultMaxPending)
	MaxStreams       int           // WebSocket relays and streamed answers one session holds open at once (0: unlimited; see Call.Stream)
	RateLimit        rate.Limit    // sandbox calls per second per session (0: unlimited)
	RateBurst        int           // burst of the per-session limit
	Metrics          prometheus.Registerer
	CheckpointEvery  uint64            // sign the chain head every N records (default 1000)
	CheckpointEach   time.Duration     // and at least this often when it moved (default 1m)
	Webhook          *approval.Webhook // announces pending actions and decisions, or nil
	Clock            clock.Clock       // decides every expiry and wakes the broker for pending actions; when set, Now is Clock.Now
	Now              func() time.Time  // without Clock: the clock (default time.Now), with the runtime's timers
	Log              *slog.Logger
	// ProxyCA gives each new session its own CA for the proxy door
	// (DESIGN §8): on when the door is (config proxy_listen).
	ProxyCA bool
	// Changes is the feed of other replicas' changes (changes.go), from a
	// store several brokers share; nil: this broker is the only one.
	Changes ChangeFeed
	// StaleAfter: with Changes, how long without confirming it is current
	// before sandbox calls are refused (default DefaultStaleAfter).
	StaleAfter time.Duration
	// ReplicaID names this broker as the owner of the actions it executes
	// (default: random per start).
	ReplicaID string
	// ActionLease: how long an executing action's claim holds unless its
	// owner renews it (default DefaultActionLease).
	ActionLease time.Duration
	// Tracer traces every sandbox call (trace.go); nil or a no-op tracer:
	// none, at no cost.
	Tracer trace.Tracer
}

// Broker is the broker's domain service.
type Broker struct {
	health    HealthCheck
	audit     *audit.Writer
	tokens    *session.Tokens
	upstreams map[string]*upstream.Upstream
	now       func() time.Time
	log       *slog.Logger
	maxTTL    time.Duration
	defTTL    time.Duration
	enforce   bool
	names     auditNames      // how the audit log names identifiers (HMAC'd)
	proxyOn   bool            // new sessions get a CA (Options.ProxyCA)
	maxStream int64           // streams per session (Options.MaxStreams; 0: unlimited)
	caSealer  *proxyca.Sealer // seals sessions' CA keys under the installation key
	tracer    trace.Tracer    // the calls' spans, nil when tracing is off (Options.Tracer)

	sess     sessionService // live sessions and grants, their store and call rates
	toks     tokenService   // API tokens
	ks       killswitch     // the global kill-switch service
	appr     *approvals     // the human gate: pending actions, decisions, execution
	auditLog auditLog       // the audit chain: checkpoints, verify, prune, scans

	metrics *metrics
	calls   *callMetrics // the sandbox calls' series (the pipeline's)
	feed    *follower    // other replicas' changes, or nil (the only replica)
	mint    *mintService // credentials minted per session (minted.go)
	// secrets is every secret the broker holds (each upstream's credential,
	// each session's minted values, rotated-out ones within their grace):
	// every answer is scrubbed of all of them (DESIGN §4).
	secrets *upstream.Secrets
	holding struct { // the fetches of holdCredentials
		wg     sync.WaitGroup
		cancel context.CancelFunc
	}
}

// Now is the broker's clock: every expiry is decided by it (see Options.Clock).
func (b *Broker) Now() time.Time { return b.now() }

// LiveSession is an active session in memory.
type LiveSession struct {
	Session session.Session
	bind    netip.Prefix
	bound   bool
	revoked atomic.Bool
	killed  atomic.Int64            // unix nanoseconds of the kill, 0 if alive
	limiter *rate.Limiter           // per-session call rate, nil when unlimited
	pending atomic.Int64            // pending actions (see pending.go)
	streams atomic.Int64            // relays and streamed answers open (see Call.Stream)
	ctx     context.Context         // the session's standing (see lifetime.go)
	cancel  context.CancelCauseFunc // ends it, with why: session.ErrRevoked, session.ErrExpired
	grants  atomic.Pointer[[]*grants.Live]
	life    lifetimes                    // the timers at its expiry and its grants' (lifetime.go)
	ca      atomic.Pointer[proxyca.CA]   // the session's CA once open (see Broker.proxyCA)
	caMu    sync.Mutex                   // one opening at a time
	resync  atomic.Pointer[rate.Limiter] // read-throughs of its grants on refusals (see decideFresh)
}

// Context ends when the session is killed (cause session.ErrRevoked) or
// expires (session.ErrExpired): in-flight calls derive from it.
func (l *LiveSession) Context() context.Context { return l.ctx }

// Grants returns the session's grants (including revoked and expired ones).
func (l *LiveSession) Grants() []*grants.Live {
	if p := l.grants.Load(); p != nil {
		return *p
	}
	return nil
}

const (
	metaSecret     = "installation_secret"
	metaKillswitch = "killswitch"
)

// sharedSecrets is the set of secrets of upstreams already serving another
// broker in this process (tests run several), or a new one.
func sharedSecrets(ups map[string]*upstream.Upstream) *upstream.Secrets {
	for _, u := range ups {
		if u != nil && u.Secrets != nil {
			return u.Secrets
		}
	}
	return upstream.NewSecrets()
}

// New loads state from the store and starts the audit writer.
func New(ctx context.Context, o Options) (*Broker, error) {
	if o.Clock != nil {
		o.Now = o.Clock.Now
	} else {
		if o.Now == nil {
			o.Now = time.Now
		}
		o.Clock = clock.WithNow(o.Now)
	}
	if err := o.fillPorts(); err != nil {
		return nil, err
	}
	var feed *follower
	if o.Changes != nil { // before any state is read: nothing changed meanwhile is missed
		var err error
		if feed, err = newFollower(ctx, o.Changes, o.StaleAfter); err != nil {
			return nil, err
		}
	}
	if o.ReplicaID == "" {
		o.ReplicaID = newID("rep_", o.Now())
	}
	secrets := sharedSecrets(o.Upstreams)
	for _, u := range o.Upstreams {
		if u == nil {
			continue
		}
		if u.Clock == nil {
			u.Clock = o.Now // the rotation grace of its scrubber
		}
		u.Secrets = secrets
	}
	secret, err := o.Meta.Meta(ctx, metaSecret)
	if errors.Is(err, ErrMetaNotFound) {
		// Created once: of brokers starting together on an empty store,
		// every one keeps the secret that won (CreateMeta).
		fresh := make([]byte, 32)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		if secret, err = o.Meta.CreateMeta(ctx, metaSecret, fresh); err != nil {
			return nil, fmt.Errorf("store installation secret: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read installation secret: %w", err)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	tokens, err := session.NewTokens(derive("session-jwt"), o.Now)
	if err != nil {
		return nil, err
	}
	apiTokens, err := o.Tokens.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("load API tokens: %w", err)
	}
	w, err := audit.NewWriter(ctx, o.Audit, o.Now, o.Log.With("component", "audit"))
	if err != nil {
		return nil, err
	}
	b := &Broker{
		health: o.Health, audit: w, tokens: tokens,
		upstreams: o.Upstreams, now: o.Now, log: o.Log,
		maxTTL: o.MaxSessionTTL, defTTL: o.DefaultTTL, enforce: o.EnforceIsolation,
		names: auditNames{key: derive("audit-hmac")}, feed: feed, tracer: tracerOf(o.Tracer),
	}
	if b.caSealer, err = proxyca.NewSealer(derive("proxy-ca-seal")); err != nil {
		w.Close()
		return nil, err
	}
	if err := bindMintStates(o.Upstreams, o.Meta, derive("minted-state-seal")); err != nil {
		w.Close()
		return nil, err
	}
	b.proxyOn = o.ProxyCA
	b.maxStream = int64(max(o.MaxStreams, 0))
	b.sess = newSessionService(o.Sessions, o.Clock, o.Now, o.RateLimit, o.RateBurst, derive("aws-sigv4-session"), b.sessionEnded)
	if o.Usage != nil {
		b.sess.counter = NewUsageCounter(o.Usage, o.Log.With("component", "usage"))
	}
	if feed != nil {
		b.sess.killed = b.killedElsewhere
	}
	b.sess.lapsed = b.lapsed
	b.appr = newApprovals(approvalsConfig{
		store: o.Actions, audit: w, names: b.names, clock: o.Clock, now: o.Now, log: o.Log,
		webhook: o.Webhook, ttl: o.ApprovalTTL, maxPending: o.MaxPending,
		replica: o.ReplicaID, lease: o.ActionLease, shared: feed != nil, usage: o.Usage,
		gate: gateDeps{
			live: b.sess.liveOrLoad, grant: b.sess.grantOrLoadNow, engaged: b.ks.engaged.Load,
			standing: func(l *LiveSession) session.RuleOfTwo { return b.ruleOfTwo(&l.Session, l.Grants()) },
			run:      b.runAction,
		},
	})
	b.toks = tokenService{
		store: o.Tokens, auth: auth.NewAuthenticator(o.AdminToken, apiTokens, o.Now),
		audit: w, names: b.names, now: o.Now, log: o.Log, notifier: b.appr.notifier,
	}
	b.metrics = newMetrics(o.Metrics, b)
	b.calls = newCallMetrics(o.Metrics, b.upstreams)
	b.secrets = secrets
	b.mint = newMintService(b, o.Clock)
	if o.Metrics != nil {
		o.Metrics.MustRegister(b.mint.count)
	}
	b.auditLog.store, b.auditLog.w, b.auditLog.now, b.auditLog.log = o.Audit, w, o.Now, o.Log
	b.auditLog.signKey = ed25519.NewKeyFromSeed(derive("audit-ed25519")[:ed25519.SeedSize])
	if cps, err := o.Audit.Checkpoints(ctx); err == nil && len(cps) > 0 {
		b.auditLog.lastCheckpoint = cps[len(cps)-1].Seq
	}
	w.OnCommit(func(n int, d time.Duration) {
		b.metrics.auditCommit.Observe(d.Seconds())
		b.metrics.auditRecords.Add(float64(n))
		b.auditLog.committed(n)
	})
	if b.feed != nil {
		w.OnSequenced(func(d time.Duration) { b.metrics.auditAppend.Observe(d.Seconds()) })
	}
	b.ks.store, b.ks.audit, b.ks.now = o.Killswitch, w, o.Now
	b.ks.onEngage = func() { b.mint.endAll("kill-switch engaged") }
	if err := b.ks.load(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := b.sess.load(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := b.appr.load(ctx); err != nil {
		w.Close()
		return nil, err
	}
	for name, u := range b.upstreams {
		if obs, ok := u.Source.(upstream.Observable); ok {
			obs.SetObserver(func(i upstream.FetchInfo) { b.credentialFetched(name, i) })
		}
	}
	b.sess.startJanitor()
	b.auditLog.startCheckpointer(o.CheckpointEvery, o.CheckpointEach)
	if b.feed != nil {
		b.feed.confirmed.Store(0) // current as of its start: the state was read after its position
		b.startFollowing()
		b.appr.startSweep()
	}
	b.holdCredentials()
	return b, nil
}

// holdCredentialsTimeout bounds one fetch of a static credential by holdCredentials.
const holdCredentialsTimeout = 15 * time.Second

// holdRefresh is how often holdCredentials fetches every static credential again.
const holdRefresh = 10 * time.Second

// holdCredentials fetches every static credential as the broker starts and
// again every holdRefresh, in the background: each is then in the set of
// held secrets (see secrets) before any call, and a rotated one (a file
// rewritten, a new Vault version once the source's cache refreshes) within
// holdRefresh even if no call fetches it, so an upstream that echoes the
// credential of another upstream this broker has not called (both front
// one API) is scrubbed of it too. Close stops it.
func (b *Broker) holdCredentials() {
	ctx, cancel := context.WithCancel(context.Background())
	b.holding.cancel = cancel
	var static []*upstream.Upstream
	for _, u := range b.upstreams {
		if u.Minter == nil && (u.Source != nil || u.AWS != nil) {
			static = append(static, u)
		}
	}
	if len(static) == 0 {
		return
	}
	fetchAll := func() {
		var wg sync.WaitGroup
		for _, u := range static {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fctx, done := context.WithTimeout(ctx, holdCredentialsTimeout)
				defer done()
				_, _ = u.Credential(fctx)
			}()
		}
		wg.Wait()
	}
	b.holding.wg.Add(1)
	go func() {
		defer b.holding.wg.Done()
		t := time.NewTicker(holdRefresh)
		defer t.Stop()
		for {
			fetchAll()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops background work, flushes the audit log and signs its head.
func (b *Broker) Close() {
	b.holding.cancel()
	b.holding.wg.Wait()
	b.auditLog.stopCheckpointer()
	b.stopFollowing()
	b.sess.stop()
	b.appr.close() // no expiry timer is armed after Close
	b.sess.cancelAll()
	b.mint.close() // leases are left to their own expiry (never past their session's)
	b.audit.Close()
	if _, err := b.Checkpoint(context.Background()); err != nil {
		b.log.Error("final audit checkpoint failed", "err", err)
	}
}

// newID makes a time-ordered identifier: prefix, 48-bit milliseconds, 64 random bits.
func newID(prefix string, now time.Time) string {
	var b [14]byte
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli()))
	copy(b[:6], ms[2:])
	_, _ = rand.Read(b[6:])
	return prefix + hex.EncodeToString(b[:])
}

// NewRequestID makes a request identifier.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// HMAC hides an identifier that could be abused (token and lease ids) in the
// audit log, keyed per installation.
func (b *Broker) HMAC(v string) string { return b.names.HMAC(v) }

// Authenticate resolves a control-plane bearer token.
func (b *Broker) Authenticate(bearer string) (auth.Principal, error) {
	return b.toks.authenticate(bearer)
}

// Upstream returns a configured upstream.
func (b *Broker) Upstream(name string) (*upstream.Upstream, bool) {
	u, ok := b.upstreams[name]
	return u, ok
}

// ActionURL is the full URL an action's stored request is sent to when it
// executes (upstream.URL: the credential never in it), or "" when its
// upstream is no longer configured (the action then cannot run).
func (b *Broker) ActionURL(a approval.Action) string {
	u, ok := b.upstreams[a.Upstream]
	if !ok {
		return ""
	}
	return u.URL(a.Request.Path, a.Request.Query)
}

// Ready reports whether the store is usable and credential sources answer.
func (b *Broker) Ready(ctx context.Context) map[string]error {
	out := map[string]error{"store": b.health.Ready(ctx), "audit": b.audit.Healthy()}
	if b.feed != nil {
		out["changes"] = nil
		if b.stale() {
			out["changes"] = fmt.Errorf("%w (last confirmed %s ago)", ErrStale, b.FeedLag().Round(time.Millisecond))
		}
	}
	for name, u := range b.upstreams {
		if u.Minter != nil {
			out["credential:"+name] = nil // minted per session: nothing to fetch without one
			continue
		}
		_, err := u.Credential(ctx)
		out["credential:"+name] = err
	}
	return out
}

// actorOf is how the audit log names a control-plane identity (see auditNames.actor).
func (b *Broker) actorOf(p auth.Principal) audit.Actor { return b.names.actor(p) }

// AuditID is the audit log's name for an API token id.
func (b *Broker) AuditID(tokenID string) string { return b.names.AuditID(tokenID) }

// auditNames is how the audit log names identifiers that could be abused
// (token and lease ids): HMAC'd with a key derived per installation.
type auditNames struct{ key []byte }

// HMAC hides v, keyed per installation.
func (n auditNames) HMAC(v string) string {
	m := hmac.New(sha256.New, n.key)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// actor is how the audit log names a control-plane identity: API token
// ids are HMAC'd with the installation key (AuditID), the bootstrap admin
// keeps its name.
func (n auditNames) actor(p auth.Principal) audit.Actor {
	return audit.Actor{Kind: p.Role, ID: n.AuditID(p.ID)}
}

// AuditID is the audit log's name for an API token id.
func (n auditNames) AuditID(tokenID string) string {
	if !strings.HasPrefix(tokenID, "tok_") {
		return tokenID
	}
	return "tok:" + n.HMAC(tokenID)
}
