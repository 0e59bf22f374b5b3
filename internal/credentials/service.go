// Package credentials is the broker's credential service: the credentials
// minted per session (leases minted, renewed, re-minted when a session's
// grants change and revoked at the issuer when it ends), the minters'
// sealed state, the static credentials held (fetched at start and every
// holdRefresh, so that every secret the broker holds is scrubbed from every
// answer), the one set of those secrets (upstream.Secrets), and the audit
// records and metrics of all of it. The credential contracts themselves
// (upstream.Source, upstream.Minter) are in internal/upstream.
//
// It knows sessions only through Holder and the lookup it is given: it
// does not import the broker.
package credentials

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// Holder is what the service needs of a live session: who it is, until
// when it stands, whether it was killed, and its grants (which scope a
// credential minted for it).
type Holder interface {
	SessionID() string
	Expires() time.Time
	// Revoked reports whether the session was killed.
	Revoked() bool
	// Grants are the session's grants, revoked and expired ones included.
	Grants() []*grants.Live
}

// Appender takes audit records the caller does not wait for (audit.Writer).
type Appender interface {
	AppendAsync(audit.Event)
}

// Config is what New needs; every field but Metrics is required.
type Config struct {
	Upstreams map[string]*upstream.Upstream
	// Clock decides leases' renewal and expiry, and the rotation grace of
	// scrubbers.
	Clock clock.Clock
	// State keeps the minters' state (upstream.MintState), sealed under
	// StateKey (32 bytes, AES-256-GCM).
	State    StateStore
	StateKey []byte
	Audit    Appender
	// HMAC is how the audit log names a lease id (keyed per installation).
	HMAC func(string) string
	// Live is the live session of an id (false: none in memory).
	Live func(id string) (Holder, bool)
	// Halted reports whether the global kill-switch is engaged.
	Halted func() bool
	// Metrics registers the service's series (nil: not registered).
	Metrics prometheus.Registerer
}

// Service is the broker's credential service.
type Service struct {
	ups     map[string]*upstream.Upstream
	clk     clock.Clock
	records Appender // the audit log
	hmac    func(string) string
	live    func(id string) (Holder, bool)
	halted  func() bool
	secrets *upstream.Secrets // every secret held: each answer is scrubbed of all

	mints    *prometheus.CounterVec // airlock_credential_mints_total
	failures *prometheus.CounterVec // airlock_credential_fetch_failures_total

	timers *clock.Alarms  // a session's leases are revoked at its expiry
	wg     sync.WaitGroup // running revocations

	mu      sync.Mutex
	entries map[string]map[string]*mintEntry // session id → upstream → entry; nil once closed

	holding struct { // the fetches of Hold
		wg     sync.WaitGroup
		cancel context.CancelFunc
	}
}

// New makes the service of the upstreams: it gives each the one set of
// held secrets and the clock, each stateful minter its sealed state, and
// each observable source the audit of its fetches. Hold starts holding the
// static credentials; Close stops the service.
func New(c Config) (*Service, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &Service{
		ups: c.Upstreams, clk: c.Clock, records: c.Audit, hmac: c.HMAC, live: c.Live, halted: c.Halted,
		secrets: sharedSecrets(c.Upstreams),
		entries: map[string]map[string]*mintEntry{},
		mints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_mints_total",
			Help: "Operations on credentials minted per session, by upstream, op (mint, renew, revoke) and result (ok, error).",
		}, []string{"upstream", "op", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_fetch_failures_total", Help: "Credential fetches that failed (the call failed closed).",
		}, []string{"upstream"}),
	}
	s.timers = clock.NewAlarms(c.Clock, func(id string) { s.EndSession(id, "session expired") })
	for name, u := range c.Upstreams {
		if u == nil {
			continue
		}
		if u.Clock == nil {
			u.Clock = c.Clock.Now // the rotation grace of its scrubber
		}
		u.Secrets = s.secrets
		if obs, ok := u.Source.(upstream.Observable); ok {
			obs.SetObserver(func(i upstream.FetchInfo) { s.fetched(name, i) })
		}
	}
	if err := bindMintStates(c.Upstreams, c.State, c.StateKey); err != nil {
		return nil, err
	}
	if c.Metrics != nil {
		c.Metrics.MustRegister(s.mints, s.failures)
	}
	return s, nil
}

// check names every required field left unset.
func (c Config) check() error {
	return fault.Required("credentials",
		fault.Field{Name: "Clock", Unset: c.Clock == nil},
		fault.Field{Name: "State", Unset: c.State == nil},
		fault.Field{Name: "Audit", Unset: c.Audit == nil},
		fault.Field{Name: "HMAC", Unset: c.HMAC == nil},
		fault.Field{Name: "Live", Unset: c.Live == nil},
		fault.Field{Name: "Halted", Unset: c.Halted == nil},
	)
}

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

// Secrets is the set of every secret the service holds (each upstream's
// credential, each session's minted values, rotated-out ones within their
// grace).
func (s *Service) Secrets() *upstream.Secrets { return s.secrets }

// Credential is session l's credential on upstream u: its lease when u's
// credential is minted per session (minted, renewed or re-minted as
// needed), else u's own. A failure is counted; it wraps
// upstream.ErrCredentialUnavailable.
func (s *Service) Credential(ctx context.Context, l Holder, u *upstream.Upstream) (upstream.Credential, error) {
	var cred upstream.Credential
	var err error
	if u.Minter != nil {
		cred, err = s.minted(ctx, l, u)
	} else {
		cred, err = u.Credential(ctx)
	}
	if err != nil {
		s.failures.WithLabelValues(u.Name).Inc()
	}
	return cred, err
}

// fetched audits a fetch from a secret store: the source and version, the
// lease id HMAC'd, never the value.
func (s *Service) fetched(name string, i upstream.FetchInfo) {
	reason := i.Source
	if i.Version > 0 {
		reason += fmt.Sprintf(" version %d", i.Version)
	}
	if i.LeaseID != "" {
		reason += " lease " + s.hmac(i.LeaseID)
	}
	s.records.AppendAsync(audit.Event{Type: audit.TypeCredentialFetch, Actor: audit.Actor{Kind: "system"}, Upstream: name, Reason: reason})
}

// Close stops holding static credentials and the leases' expiry timers,
// and waits for running revocations; the leases held are left to their own
// expiry (never past their session's).
func (s *Service) Close() {
	if s.holding.cancel != nil {
		s.holding.cancel()
	}
	s.holding.wg.Wait()
	s.timers.Close()
	s.mu.Lock()
	s.entries = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// clip bounds an error's text before it goes in a record.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
