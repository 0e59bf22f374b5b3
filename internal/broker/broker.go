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
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auditlog"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/credentials"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/gate"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/ids"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/usage"
)

// Errors of broker operations (besides those of session, grants, upstream, audit).
var (
	ErrNotFound        = fault.Hidden(fault.NotFound, "not found")
	ErrForbidden       = fault.New(fault.Forbidden, "forbidden")
	ErrConflict        = fault.New(fault.Conflict, "conflict")
	ErrUnknownUpstream = fault.New(fault.NotFound, "unknown upstream")
)

// Ports are the store's ports the broker's services use: every one is
// required but Usage. The wiring (cmd/broker) fills each from the one
// configured store; a test may give some another.
type Ports struct {
	Sessions   sessions.Store       // sessions and grants
	Audit      auditlog.Store       // the audit chain and its index by session
	Actions    approval.ActionStore // actions awaiting or after approval
	Tokens     apitokens.Store      // API tokens' digests
	Killswitch killswitch.Store     // the kill-switch's durable state
	Meta       meta.Store           // the installation secret, minters' state, MCP tools' first digests
	Health     HealthCheck          // the storage's readiness, reported by Ready as "store"
	Usage      usage.Store          // counts grants' limits when the store is shared (nil: in memory)
}

// Options configure a Broker.
type Options struct {
	Ports            // the store's ports, each required but Usage
	Upstreams        map[string]*upstream.Upstream
	AdminToken       string
	MaxSessionTTL    time.Duration
	DefaultTTL       time.Duration
	EnforceIsolation bool
	ApprovalTTL      time.Duration // how long a pending action waits (default 15m)
	MaxPending       int           // pending actions per session (default gate.DefaultMaxPending)
	MaxStreams       int           // WebSocket relays and streamed answers one session holds open at once (0: unlimited; see Call.Stream)
	RateLimit        rate.Limit    // sandbox calls per second per session (0: unlimited)
	RateBurst        int           // burst of the per-session limit
	Metrics          prometheus.Registerer
	CheckpointEvery  uint64            // sign the chain head every N records (default 1000)
	CheckpointEach   time.Duration     // and at least this often when it moved (default 1m)
	Webhook          *approval.Webhook // announces pending actions and decisions, or nil
	Clock            clock.Clock       // decides every expiry and wakes the broker for pending actions (default clock.Real)
	Log              *slog.Logger
	// ProxyCA gives each new session its own CA for the proxy door
	// (DESIGN §8): on when the door is (config proxy_listen).
	ProxyCA bool
	// Changes is the feed of other replicas' changes (changes.go), from a
	// store several brokers share; nil: this broker is the only one.
	Changes changefeed.Feed
	// StaleAfter: with Changes, how long without confirming it is current
	// before sandbox calls are refused (default changefeed.DefaultStaleAfter).
	StaleAfter time.Duration
	// ReplicaID names this broker as the owner of the actions it executes
	// (default: random per start).
	ReplicaID string
	// ActionLease: how long an executing action's claim holds unless its
	// owner renews it (default gate.DefaultActionLease).
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
	names     auditNames      // how the audit log names identifiers (HMAC'd)
	maxStream int64           // streams per session (Options.MaxStreams; 0: unlimited)
	caSealer  *proxyca.Sealer // seals sessions' CA keys under the installation key
	tracer    trace.Tracer    // the calls' spans, nil when tracing is off (Options.Tracer)

	sess     *sessions.Service   // live sessions and grants, their store and call rates
	toks     *apitokens.Service  // API tokens
	ks       *killswitch.Service // the global kill-switch
	appr     *gate.Service       // the human gate: pending actions, decisions, execution
	auditLog *auditlog.Service   // the audit chain: checkpoints, verify, prune, scans

	metrics *metrics
	calls   *callMetrics         // the sandbox calls' series (the pipeline's)
	feed    *changefeed.Follower // other replicas' changes, or nil (the only replica)
	// creds is the credential service: credentials minted per session,
	// static ones held, and the set of every secret held, which every
	// answer is scrubbed of.
	creds *credentials.Service
	mcp   mcpLinks // the sessions' MCP sessions on MCP upstreams (mcplink.go)
	// mcpIDs are the MCP door's session ids (mcpsession.go).
	mcpIDs mcpSessionIDs
	// toolDigests keeps the MCP tools' digests first seen by any replica
	// (mcptools.go).
	toolDigests meta.Store
}

// Now is the broker's clock: every expiry is decided by it (see Options.Clock).
func (b *Broker) Now() time.Time { return b.now() }

// metaSecret is the meta store key of the installation secret.
const metaSecret = "installation_secret"

// New loads state from the store and starts the audit writer.
func New(ctx context.Context, o Options) (*Broker, error) {
	if err := o.prepare(); err != nil {
		return nil, err
	}
	var feed *changefeed.Follower
	if o.Changes != nil { // before any state is read: nothing changed meanwhile is missed
		var err error
		if feed, err = changefeed.New(ctx, o.Changes, o.StaleAfter); err != nil {
			return nil, err
		}
	}
	key, err := installationKey(ctx, o.Meta)
	if err != nil {
		return nil, err
	}
	tokens, err := session.NewTokens(key.derive("session-jwt"), o.Clock.Now)
	if err != nil {
		return nil, err
	}
	w, err := audit.NewWriter(ctx, o.Audit, o.Clock.Now, o.Log.With("component", "audit"))
	if err != nil {
		return nil, err
	}
	b := &Broker{
		health: o.Health, audit: w, tokens: tokens,
		upstreams: o.Upstreams, now: o.Clock.Now, log: o.Log,
		names: auditNames{key: key.derive("audit-hmac")}, feed: feed,
		mcpIDs: mcpSessionIDs{key: key.derive("mcp-session-id"), now: o.Clock.Now}, toolDigests: o.Meta,
		maxStream: int64(max(o.MaxStreams, 0)), tracer: tracerOf(o.Tracer),
	}
	if err := b.build(ctx, o, key); err != nil {
		w.Close()
		return nil, err
	}
	b.start()
	return b, nil
}

// prepare fills Options' defaults: the clock and the
// replica's id.
func (o *Options) prepare() error {
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if err := o.Ports.check(); err != nil {
		return err
	}
	if o.Changes != nil && o.Usage == nil {
		// Several brokers on one store: limits counted in memory would
		// give each replica its own (DESIGN §9).
		return errors.New("broker: a store shared by several brokers (Changes) needs its Usage port")
	}
	if o.ReplicaID == "" {
		o.ReplicaID = ids.New("rep_", o.Clock.Now())
	}
	return nil
}

// installKey is the installation secret, shared by every broker on the
// store; the broker's keys are derived from it, one per use.
type installKey []byte

// installationKey reads the installation secret, or creates it once: of
// brokers starting together on an empty store, every one keeps the secret
// that won (CreateMeta).
func installationKey(ctx context.Context, m meta.Store) (installKey, error) {
	secret, err := m.Meta(ctx, metaSecret)
	if errors.Is(err, meta.ErrNotFound) {
		fresh := make([]byte, 32)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		if secret, err = m.CreateMeta(ctx, metaSecret, fresh); err != nil {
			return nil, fmt.Errorf("store installation secret: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read installation secret: %w", err)
	}
	return secret, nil
}

// derive is the key for use label.
func (k installKey) derive(label string) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// build makes the broker's services over the audit writer b.audit, its
// metrics and its minted credentials, then loads the stored state.
func (b *Broker) build(ctx context.Context, o Options, key installKey) error {
	var err error
	if b.caSealer, err = proxyca.NewSealer(key.derive("proxy-ca-seal")); err != nil {
		return err
	}
	if b.creds, err = credentials.New(credentials.Config{
		Upstreams: o.Upstreams, Clock: o.Clock, State: mintStates{o.Meta}, StateKey: key.derive("minted-state-seal"),
		Audit: b.audit, HMAC: b.HMAC, Live: b.liveCredentials, Halted: func() bool { return b.ks.Engaged() }, Metrics: o.Metrics,
	}); err != nil {
		return err
	}
	if err := b.services(ctx, o, key); err != nil {
		return err
	}
	b.metrics = newMetrics(o.Metrics, b)
	b.calls = newCallMetrics(o.Metrics, b.upstreams)
	b.audit.OnCommit(func(n int, d time.Duration) {
		b.metrics.auditCommit.Observe(d.Seconds())
		b.metrics.auditRecords.Add(float64(n))
		b.auditLog.Committed(n)
	})
	if b.feed != nil {
		b.audit.OnSequenced(func(d time.Duration) { b.metrics.auditAppend.Observe(d.Seconds()) })
	}
	if err := b.sess.Load(ctx); err != nil {
		return err
	}
	return b.appr.Load(ctx)
}

// services makes the kill-switch, the sessions, the approvals, the API
// tokens and the audit log, each given what it needs of the others.
func (b *Broker) services(ctx context.Context, o Options, key installKey) error {
	w := b.audit
	var err error
	if b.ks, err = killswitch.New(ctx, o.Killswitch, w, o.Clock.Now, func() { b.creds.EndAll("kill-switch engaged") }); err != nil {
		return err
	}
	if b.appr, err = gate.New(gate.Config{
		Store: o.Actions, Audit: w, Actor: b.names.Actor, Clock: o.Clock, Log: o.Log,
		Live: b.liveSandbox, Grant: func(id string) (*grants.Live, bool) { return b.sess.GrantOrLoadNow(id) }, Engaged: b.ks.Engaged, Standing: b.ruleOfTwoOf, Run: b.runAction,
		Replica: o.ReplicaID, Webhook: o.Webhook, TTL: o.ApprovalTTL, MaxPending: o.MaxPending,
		Lease: o.ActionLease, Shared: b.feed != nil, Usage: o.Usage, Metrics: o.Metrics,
	}); err != nil {
		return err
	}
	sc := sessions.Config{Store: o.Sessions, Clock: o.Clock, Tokens: b.tokens, RateLimit: o.RateLimit, RateBurst: o.RateBurst,
		AWSKey: key.derive("aws-sigv4-session"), MaxTTL: o.MaxSessionTTL, DefaultTTL: o.DefaultTTL, EnforceIsolation: o.EnforceIsolation,
		Audit: w, Actor: b.actorOf, Gate: b.appr, Credentials: b.creds, Killswitch: b.ks, RuleOfTwo: b.ruleOfTwo, Kind: b.upstreamKind, AWS: b.awsUpstream,
		Ended: b.sessionEnded, Shared: b.feed != nil}
	if o.ProxyCA {
		sc.Placeholders, sc.NewCA = b.mintPlaceholders, b.newProxyCA
	}
	if o.Usage != nil {
		sc.Counter = usage.NewCounter(o.Usage, o.Log.With("component", "usage"))
	}
	if b.sess, err = sessions.New(sc); err != nil {
		return err
	}
	if b.toks, err = apitokens.New(ctx, apitokens.Config{Store: o.Tokens, AdminToken: o.AdminToken,
		Audit: w, Names: b.names, Now: o.Clock.Now, Log: o.Log, OnRevoke: b.appr.Notify}); err != nil {
		return err
	}
	b.auditLog = auditlog.New(ctx, auditlog.Config{Store: o.Audit, Writer: w, Now: o.Clock.Now, Log: o.Log,
		SignKey: ed25519.NewKeyFromSeed(key.derive("audit-ed25519")[:ed25519.SeedSize]),
		Every:   o.CheckpointEvery, Interval: o.CheckpointEach})
	return nil
}

// start starts the broker's background work: the session janitor, the
// checkpointer, following the change feed (with the approvals' sweep),
// holding the static credentials.
func (b *Broker) start() {
	b.sess.Start()
	b.auditLog.Start()
	if b.feed != nil {
		b.feed.Start(b.applyChange) // current as of its start: the state was read after its position
		b.appr.StartSweep()
	}
	b.creds.Hold()
}

// Close stops background work, flushes the audit log and signs its head.
func (b *Broker) Close() {
	b.auditLog.Stop()
	if b.feed != nil {
		b.feed.Stop()
	}
	b.sess.Stop()
	b.appr.Close() // no expiry timer is armed after Close
	b.sess.CancelAll()
	b.appr.Drain()  // executions cut by their sessions' end finish before the audit log closes
	b.creds.Close() // leases are left to their own expiry (never past their session's)
	b.audit.Close()
	if _, err := b.Checkpoint(context.Background()); err != nil {
		b.log.Error("final audit checkpoint failed", "err", err)
	}
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

// actorOf is how the audit log names a control-plane identity (see auditNames.Actor).
func (b *Broker) actorOf(p auth.Principal) audit.Actor { return b.names.Actor(p) }

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

// Actor is how the audit log names a control-plane identity: API token
// ids are HMAC'd with the installation key (AuditID), the bootstrap admin
// keeps its name.
func (n auditNames) Actor(p auth.Principal) audit.Actor {
	return audit.Actor{Kind: p.Role, ID: n.AuditID(p.ID)}
}

// AuditID is the audit log's name for an API token id.
func (n auditNames) AuditID(tokenID string) string {
	if !strings.HasPrefix(tokenID, "tok_") {
		return tokenID
	}
	return "tok:" + n.HMAC(tokenID)
}
