package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/proxyca"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
)

// ErrNoProxyCA means the session has no CA: the proxy door was off when it
// was created. It is an ErrNotFound.
var ErrNoProxyCA = &fault.Error{Kind: fault.NotFound, Msg: "the session has no proxy CA", Err: ErrNotFound}

// newProxyCA makes session s's CA and stores it sealed in s (before s is
// stored). The open CA is returned to go live with the session.
func (b *Broker) newProxyCA(s *session.Session) (*proxyca.CA, error) {
	ca, err := proxyca.New(s.ID, s.ExpiresAt, b.now)
	if err != nil {
		return nil, fmt.Errorf("session CA: %w", err)
	}
	sealed, err := b.caSealer.Seal(ca)
	if err != nil {
		return nil, fmt.Errorf("seal session CA: %w", err)
	}
	s.ProxyCA = &session.ProxyCA{CertDER: ca.CertDER(), SealedKey: sealed}
	return ca, nil
}

// mintPlaceholders makes a new session's placeholder tokens: one per
// upstream that configures a placeholder (whether or not the session holds
// a grant on it, so a grant added later finds its variable set), stored
// with the session so every answer about it repeats them. They are worth
// nothing: the proxy door drops them and injects the real credential.
func (b *Broker) mintPlaceholders() (map[string]string, error) {
	var out map[string]string
	for _, u := range b.upstreams {
		if u == nil || u.Placeholder == nil {
			continue
		}
		v, err := u.Placeholder.Mint()
		if err != nil {
			return nil, fmt.Errorf("mint placeholder: %w", err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[u.Placeholder.Env] = v
	}
	return out, nil
}

// proxyCA is a live session's CA, opened from its sealed form on first use
// (after a restart, or on a replica) and then kept in memory.
func (b *Broker) proxyCA(l *sessions.LiveSession) (*proxyca.CA, error) {
	return l.OpenCA(func() (*proxyca.CA, error) {
		pc := l.Session.ProxyCA
		if pc == nil {
			return nil, ErrNoProxyCA
		}
		ca, err := b.caSealer.Open(l.Session.ID, pc.CertDER, pc.SealedKey, b.now)
		if err != nil {
			return nil, fmt.Errorf("open the CA of session %s: %w", l.Session.ID, err)
		}
		return ca, nil
	})
}

// ProxyLeaf is a TLS server certificate for host, issued by session
// sessionID's own CA (cached per host), for the proxy door's handshake.
// It fails with killswitch.ErrEngaged when the kill-switch is engaged,
// session.ErrRevoked for a killed session, session.ErrExpired for an
// expired one, session.ErrInvalidToken for an unknown one, ErrNoProxyCA
// when the session has no CA, proxyca.ErrBadHost for a name no
// certificate can carry. It decides nothing about egress: the door admits
// the session and checks the host against its grants first.
func (b *Broker) ProxyLeaf(sessionID, host string) (*tls.Certificate, error) {
	if b.ks.Engaged() {
		return nil, killswitch.ErrEngaged
	}
	l, ok := b.live(sessionID)
	if !ok {
		return nil, b.notLive(context.Background(), sessionID)
	}
	switch {
	case l.Revoked():
		return nil, session.ErrRevoked
	case !b.now().Before(l.Session.ExpiresAt):
		return nil, session.ErrExpired
	}
	ca, err := b.proxyCA(l)
	if err != nil {
		return nil, err
	}
	leaf, err := ca.Leaf(host)
	if errors.Is(err, proxyca.ErrExpired) {
		return nil, session.ErrExpired
	}
	return leaf, err
}

// notLive is why a session not in memory cannot be used: revoked, expired
// (and forgotten) or unknown.
func (b *Broker) notLive(ctx context.Context, id string) error {
	s, err := b.sess.Store().Session(ctx, id)
	switch {
	case err == nil && !s.RevokedAt.IsZero():
		return session.ErrRevoked
	case err == nil:
		return session.ErrExpired
	}
	return session.ErrInvalidToken
}

// SessionCA is the PEM of session id's CA certificate (public: what a
// sandbox trusts), for any session that has one, live or over. It returns
// ErrNotFound for an unknown session and ErrNoProxyCA for a session
// created while the proxy door was off.
func (b *Broker) SessionCA(ctx context.Context, id string) ([]byte, error) {
	var s session.Session
	if l, ok := b.live(id); ok {
		s = l.Session
	} else {
		var err error
		s, err = b.sess.Store().Session(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	if s.ProxyCA == nil {
		return nil, ErrNoProxyCA
	}
	return proxyca.CertPEM(s.ProxyCA.CertDER), nil
}
