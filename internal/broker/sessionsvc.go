package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
)

// sessionService holds the live sessions and their grants in memory (the
// hot path reads them without the store), the tokens already verified, the
// per-session call rate, and writes through to its SessionStore. A janitor
// forgets expired sessions so memory stays bounded.
type sessionService struct {
	store     SessionStore
	clock     clock.Clock // arms the sessions' and grants' expiry (lifetime.go)
	now       func() time.Time
	rateLimit rate.Limit // sandbox calls per second per session (0: unlimited)
	rateBurst int
	awsKey    []byte                               // derives each session's SigV4 secret
	ended     func(*LiveSession, time.Time)        // observes a session that expired (metrics)
	counter   grants.Counter                       // counts limited grants when the store is shared (usage.Store), or nil
	killed    func(id string)                      // ends a session in memory killed by another replica (changes.go); nil without a change feed
	lapsed    func(l *LiveSession, g *grants.Live) // observes a session's expiry (g nil) or a grant's, at its instant (lifetime.go); may be nil

	mu       sync.RWMutex
	sessions map[string]*LiveSession
	byToken  map[string]*LiveSession
	grantIdx map[string]*grants.Live

	stopJanitor chan struct{}
	janitorDone chan struct{}
}

func newSessionService(st SessionStore, clk clock.Clock, now func() time.Time, limit rate.Limit, burst int, awsKey []byte, ended func(*LiveSession, time.Time)) sessionService {
	return sessionService{
		store: st, clock: clk, now: now, rateLimit: limit, rateBurst: max(burst, 1), awsKey: awsKey, ended: ended,
		sessions: map[string]*LiveSession{}, byToken: map[string]*LiveSession{}, grantIdx: map[string]*grants.Live{},
		stopJanitor: make(chan struct{}), janitorDone: make(chan struct{}),
	}
}

// load brings the stored sessions that are alive, and their grants, into memory.
func (s *sessionService) load(ctx context.Context) error {
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
func (s *sessionService) loadGrants(ctx context.Context, sessionID string) ([]*grants.Live, error) {
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
func (s *sessionService) addLive(ss session.Session, gs []*grants.Live) *LiveSession {
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

// live finds a session in memory.
func (s *sessionService) live(id string) (*LiveSession, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.sessions[id]
	return l, ok
}

// byTokenLive finds the session of a token already verified.
func (s *sessionService) byTokenLive(token string) (*LiveSession, bool) {
	s.mu.RLock()
	l, ok := s.byToken[token]
	s.mu.RUnlock()
	return l, ok
}

// remember records a verified token's session.
func (s *sessionService) remember(token string, l *LiveSession) {
	s.mu.Lock()
	s.byToken[token] = l
	s.mu.Unlock()
}

// grant finds a grant of a session in memory.
func (s *sessionService) grant(id string) (*grants.Live, bool) {
	s.mu.RLock()
	gl, ok := s.grantIdx[id]
	s.mu.RUnlock()
	return gl, ok
}

// all lists the sessions in memory.
func (s *sessionService) all() []*LiveSession {
	s.mu.RLock()
	ls := make([]*LiveSession, 0, len(s.sessions))
	for _, l := range s.sessions {
		ls = append(ls, l)
	}
	s.mu.RUnlock()
	return ls
}

// startJanitor starts forgetting expired sessions every minute.
func (s *sessionService) startJanitor() { go s.janitor() }

// stop stops the janitor and waits for it.
func (s *sessionService) stop() {
	close(s.stopJanitor)
	<-s.janitorDone
}

// cancelAll ends every live session's context.
func (s *sessionService) cancelAll() {
	s.mu.Lock()
	for _, l := range s.sessions {
		l.life.stop()
		l.cancel(session.ErrRevoked)
	}
	s.mu.Unlock()
}

// janitor forgets expired sessions so memory stays bounded.
func (s *sessionService) janitor() {
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

func (s *sessionService) forgetExpired() {
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

// awsSecret is a session's SigV4 signing secret (see Broker.AWSSecret).
func (s *sessionService) awsSecret(sessionID string) string {
	m := hmac.New(sha256.New, s.awsKey)
	m.Write([]byte(sessionID))
	return hex.EncodeToString(m.Sum(nil))
}

// limited reports whether a grant has limits to count (max_uses or a
// budget): only those reach the usage.Store.
func limited(g *grants.Grant) bool { return g.MaxUses > 0 || len(g.Budget) > 0 }

// share makes the store count gs' limits, when it is shared (a usage.Store).
func (s *sessionService) share(gs ...*grants.Live) {
	if s.counter == nil {
		return
	}
	for _, g := range gs {
		if limited(&g.Grant) && !g.Shared() {
			g.SetCounter(s.counter)
		}
	}
}
