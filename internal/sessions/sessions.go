// Package sessions is the session service: the live sessions and their
// grants in memory (the hot path reads them without the store), written
// through to its Store, read through from it on a miss (what another
// broker on the store created), the tokens already verified, the
// per-session call rate, each session's and grant's lifetime on the
// injected clock, and a janitor that forgets expired sessions so memory
// stays bounded. It knows nothing of the broker: what it needs of the
// rest it is given in its Config.
package sessions

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
)

// ErrNotFound is Store.Session's and Store.Grant's error for an unknown
// session or grant id. Each store port returns its own not-found error for
// an unknown key (an adapter may wrap it with its own error: errors.Is
// matches), and the broker tests only these, never an adapter's error:
// this one, apitokens.ErrNotFound, meta.ErrNotFound and
// approval.ErrNotFound. The contract suite internal/store/storetest checks
// them.
var ErrNotFound = errors.New("session or grant not found")

// GrantRecord is a stored grant with its usage.
type GrantRecord struct {
	Grant grants.Grant
	Usage grants.Usage
}

// Store is what sessions and their grants need persisted. Session and
// Grant return ErrNotFound for an unknown id; Sessions lists in id
// (creation) order after after, at most limit.
type Store interface {
	PutSession(ctx context.Context, s *session.Session) error
	CreateSession(ctx context.Context, s *session.Session, gs []grants.Grant) error
	Session(ctx context.Context, id string) (session.Session, error)
	Sessions(ctx context.Context, after string, limit int) ([]session.Session, error)
	PutGrant(ctx context.Context, g *grants.Grant, u grants.Usage) error
	Grant(ctx context.Context, id string) (GrantRecord, error)
	SessionGrants(ctx context.Context, sessionID string) ([]GrantRecord, error)
}

// Audit records the sessions' and grants' changes (an *audit.Writer).
type Audit interface {
	Append(ctx context.Context, ev audit.Event, side *grants.UsageUpdate) (audit.Event, error)
}

// Gate is what the session service needs of the human gate
// (gate.Service): a session's or grant's end denies its pending actions,
// and every change wakes the pages.
type Gate interface {
	DenySession(ctx context.Context, p auth.Principal, sessionID string)
	DenyLapsed(ctx context.Context, actor audit.Actor, reviewer, sessionID string, g *grants.Live, reason string)
	Notify()
}

// Killswitch is what work bound to a session needs of the global
// kill-switch (killswitch.Service): the period it cuts work in, and
// whether it is engaged.
type Killswitch interface {
	Period() context.Context
	Engaged() bool
}

// Credentials is what the session service needs of the credential
// service (credentials.Service): a lease minted with a session's grants
// is re-minted when they change.
type Credentials interface {
	Rescope(sessionID, upstream string)
}

// Config is what the session service is made of. Store, Clock, Tokens,
// AWSKey, Audit, Actor, Gate, Credentials, Killswitch, RuleOfTwo, Kind,
// AWS and Ended are required.
type Config struct {
	Store     Store
	Clock     clock.Clock     // decides and arms the sessions' and grants' expiry (lifetime.go)
	Tokens    *session.Tokens // issues and verifies the session tokens
	RateLimit rate.Limit      // sandbox calls per second per session (0: unlimited)
	RateBurst int             // burst of the per-session limit (at least 1)
	AWSKey    []byte          // derives each session's SigV4 secret (AWSSecret)
	MaxTTL    time.Duration   // the longest session asked for
	// DefaultTTL is a session's when its request names none.
	DefaultTTL time.Duration
	// EnforceIsolation refuses a session (or a grant) whose Rule-of-Two
	// standing requires a stronger isolation than it declares.
	EnforceIsolation bool
	Audit            Audit
	Actor            func(auth.Principal) audit.Actor // how the audit log names a principal
	Gate             Gate
	Credentials      Credentials
	Killswitch       Killswitch // cuts work bound to a session (Bound)
	// RuleOfTwo derives a session's standing from its untrusted input and
	// usable grants.
	RuleOfTwo func(untrusted bool, gs []*grants.Live) session.RuleOfTwo
	// Kind is a configured upstream's kind (false: not configured), for
	// grants' validation.
	Kind func(upstream string) (string, bool)
	// AWS reports whether an upstream is an AWS one: a session with a
	// grant on it is shown its SigV4 secret at creation.
	AWS func(upstream string) bool
	// Placeholders makes a new session's placeholder tokens, and NewCA its
	// CA (sealed into the session before it is stored): both only when the
	// proxy door is on, nil otherwise.
	Placeholders func() (map[string]string, error)
	NewCA        func(*session.Session) (*proxyca.CA, error)
	// Ended observes a session's end: killed (here or elsewhere) at its
	// kill, expired when it is forgotten.
	Ended func(l *LiveSession, at time.Time)
	// Counter counts limited grants when the store is shared (usage.Store), or nil.
	Counter grants.Counter
	// Shared: other replicas share the store (a change feed): a session
	// read through is read again to see a kill the feed applied before it
	// was in memory.
	Shared bool
}

// check names every required field left unset.
func (c Config) check() error {
	return fault.Required("sessions",
		fault.Field{Name: "Store", Unset: c.Store == nil},
		fault.Field{Name: "Clock", Unset: c.Clock == nil},
		fault.Field{Name: "Tokens", Unset: c.Tokens == nil},
		fault.Field{Name: "AWSKey", Unset: len(c.AWSKey) == 0},
		fault.Field{Name: "Audit", Unset: c.Audit == nil},
		fault.Field{Name: "Actor", Unset: c.Actor == nil},
		fault.Field{Name: "Gate", Unset: c.Gate == nil},
		fault.Field{Name: "Credentials", Unset: c.Credentials == nil},
		fault.Field{Name: "Killswitch", Unset: c.Killswitch == nil},
		fault.Field{Name: "RuleOfTwo", Unset: c.RuleOfTwo == nil},
		fault.Field{Name: "Kind", Unset: c.Kind == nil},
		fault.Field{Name: "AWS", Unset: c.AWS == nil},
		fault.Field{Name: "Ended", Unset: c.Ended == nil},
	)
}

// Service holds the live sessions and their grants (see the package doc).
type Service struct {
	store        Store
	clock        clock.Clock
	now          func() time.Time
	tokens       *session.Tokens
	rateLimit    rate.Limit
	rateBurst    int
	awsKey       []byte
	maxTTL       time.Duration
	defTTL       time.Duration
	enforce      bool
	audit        Audit
	actor        func(auth.Principal) audit.Actor
	gate         Gate
	creds        Credentials
	ks           Killswitch
	ruleOfTwo    func(untrusted bool, gs []*grants.Live) session.RuleOfTwo
	kind         func(string) (string, bool)
	aws          func(string) bool
	placeholders func() (map[string]string, error)
	newCA        func(*session.Session) (*proxyca.CA, error)
	ended        func(*LiveSession, time.Time)
	counter      grants.Counter
	killed       func(id string) // ends a session found killed on a read-through; nil without Shared

	mu       sync.RWMutex
	sessions map[string]*LiveSession
	byToken  map[string]*LiveSession
	grantIdx map[string]*grants.Live

	stopJanitor chan struct{}
	janitorDone chan struct{}
}

// New makes the session service, empty until Load.
func New(c Config) (*Service, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &Service{
		store: c.Store, clock: c.Clock, now: c.Clock.Now, tokens: c.Tokens, rateLimit: c.RateLimit, rateBurst: max(c.RateBurst, 1),
		awsKey: c.AWSKey, maxTTL: c.MaxTTL, defTTL: c.DefaultTTL, enforce: c.EnforceIsolation,
		audit: c.Audit, actor: c.Actor, gate: c.Gate, creds: c.Credentials, ks: c.Killswitch, ruleOfTwo: c.RuleOfTwo,
		kind: c.Kind, aws: c.AWS, placeholders: c.Placeholders, newCA: c.NewCA, ended: c.Ended, counter: c.Counter,
		sessions: map[string]*LiveSession{}, byToken: map[string]*LiveSession{}, grantIdx: map[string]*grants.Live{},
		stopJanitor: make(chan struct{}), janitorDone: make(chan struct{}),
	}
	if c.Shared {
		s.killed = s.KilledElsewhere
	}
	return s, nil
}

// Store is the service's port, for the reads of the broker's pipeline.
func (s *Service) Store() Store { return s.store }

// Load brings the stored sessions that are alive, and their grants, into memory.
func (s *Service) Load(ctx context.Context) error {
	now := s.now()
	after := ""
	for {
		page, err := s.store.Sessions(ctx, after, 1000)
		if err != nil {
			return fmt.Errorf("load sessions: %w", err)
		}
		for _, ss := range page {
			if !ss.RevokedAt.IsZero() || !now.Before(ss.ExpiresAt) {
				continue
			}
			live, err := s.loadGrants(ctx, ss.ID)
			if err != nil {
				return err
			}
			s.addLive(ss, live)
		}
		if len(page) < 1000 {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// loadGrants reads and compiles a session's stored grants.
func (s *Service) loadGrants(ctx context.Context, sessionID string) ([]*grants.Live, error) {
	recs, err := s.store.SessionGrants(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("load grants of %s: %w", sessionID, err)
	}
	var live []*grants.Live
	for _, r := range recs {
		g, err := grants.Compile(r.Grant, r.Usage)
		if err != nil {
			return nil, fmt.Errorf("compile grant %s: %w", r.Grant.ID, err)
		}
		if !r.Grant.RevokedAt.IsZero() {
			g.Revoke()
		}
		live = append(live, g)
	}
	return live, nil
}

// addLive puts a session in memory, unless it is there already (a read
// through racing another, see lookup): the one in memory is returned.
func (s *Service) addLive(ss session.Session, gs []*grants.Live) *LiveSession {
	l := &LiveSession{Session: ss}
	if s.rateLimit > 0 {
		l.limiter = rate.NewLimiter(s.rateLimit, s.rateBurst)
	}
	l.bind, l.bound = ss.Bind()
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	s.share(gs...)
	l.grants.Store(&gs)
	s.mu.Lock()
	if had, ok := s.sessions[ss.ID]; ok {
		s.mu.Unlock()
		l.cancel(context.Canceled)
		return had
	}
	s.sessions[ss.ID] = l
	for _, g := range gs {
		g.Bind(l.ctx) // before it is found: work on it ends with it
		s.grantIdx[g.Grant.ID] = g
	}
	s.armLifetimes(l, gs)
	s.mu.Unlock()
	return l
}

// Live finds a session in memory.
func (s *Service) Live(id string) (*LiveSession, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.sessions[id]
	return l, ok
}

// tokenLive finds the session of a token already verified.
func (s *Service) tokenLive(token string) (*LiveSession, bool) {
	s.mu.RLock()
	l, ok := s.byToken[token]
	s.mu.RUnlock()
	return l, ok
}

// remember records a verified token's session.
func (s *Service) remember(token string, l *LiveSession) {
	s.mu.Lock()
	s.byToken[token] = l
	s.mu.Unlock()
}

// LiveGrant finds a grant of a session in memory.
func (s *Service) LiveGrant(id string) (*grants.Live, bool) {
	s.mu.RLock()
	gl, ok := s.grantIdx[id]
	s.mu.RUnlock()
	return gl, ok
}

// all lists the sessions in memory.
func (s *Service) all() []*LiveSession {
	s.mu.RLock()
	ls := make([]*LiveSession, 0, len(s.sessions))
	for _, l := range s.sessions {
		ls = append(ls, l)
	}
	s.mu.RUnlock()
	return ls
}

// revoke ends a session in memory at now (killed here or by another
// replica): its token stops working, its timers stop, its standing ends
// (cause session.ErrRevoked: work in flight ends as the session's, not its
// grants') and then its grants are revoked. It reports false, doing
// nothing, when the session was revoked already.
func (s *Service) revoke(l *LiveSession, now time.Time) bool {
	if l.revoked.Swap(true) {
		return false
	}
	l.killed.Store(now.UnixNano())
	l.life.stop()
	l.cancel(session.ErrRevoked)
	for _, g := range l.Grants() {
		g.Revoke()
	}
	return true
}

// Start starts forgetting expired sessions every minute.
func (s *Service) Start() { go s.janitor() }

// Stop stops the janitor and waits for it.
func (s *Service) Stop() {
	close(s.stopJanitor)
	<-s.janitorDone
}

// CancelAll ends every live session's context.
func (s *Service) CancelAll() {
	s.mu.Lock()
	for _, l := range s.sessions {
		l.life.stop()
		l.cancel(session.ErrRevoked)
	}
	s.mu.Unlock()
}

// janitor forgets expired sessions so memory stays bounded.
func (s *Service) janitor() {
	defer close(s.janitorDone)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.stopJanitor:
			return
		case <-t.C:
			s.forgetExpired()
		}
	}
}

func (s *Service) forgetExpired() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, l := range s.sessions {
		if now.Before(l.Session.ExpiresAt) && !l.revoked.Load() {
			continue
		}
		cause := session.ErrRevoked
		if !l.revoked.Load() {
			s.ended(l, l.Session.ExpiresAt) // killed sessions were observed at the kill
			cause = session.ErrExpired
		}
		l.life.stop() // fired already, or the session was killed: nothing left armed
		l.cancel(cause)
		delete(s.sessions, id)
		for _, g := range l.Grants() {
			delete(s.grantIdx, g.Grant.ID)
		}
	}
	for tok, l := range s.byToken {
		if _, ok := s.sessions[l.Session.ID]; !ok {
			delete(s.byToken, tok)
		}
	}
}

// AWSSecret is a session's SigV4 signing secret: derived from the session
// id under the installation's key (Config.AWSKey), never stored.
func (s *Service) AWSSecret(sessionID string) string {
	m := hmac.New(sha256.New, s.awsKey)
	m.Write([]byte(sessionID))
	return hex.EncodeToString(m.Sum(nil))
}

// Limited reports whether a grant has limits to count (max_uses or a
// budget): only those reach the usage.Store.
func Limited(g *grants.Grant) bool { return g.MaxUses > 0 || len(g.Budget) > 0 }

// share makes the store count gs' limits, when it is shared (a usage.Store).
func (s *Service) share(gs ...*grants.Live) {
	if s.counter == nil {
		return
	}
	for _, g := range gs {
		if Limited(&g.Grant) && !g.Shared() {
			g.SetCounter(s.counter)
		}
	}
}
