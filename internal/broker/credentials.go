package broker

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-broker/airlock/internal/credentials"
	"github.com/airlock-broker/airlock/internal/meta"
)

// What the credential service (internal/credentials) needs of the broker.

// SessionID, Expires and Revoked make a LiveSession a credentials.Holder.
func (l *LiveSession) SessionID() string { return l.Session.ID }

// Expires is the session's expiry.
func (l *LiveSession) Expires() time.Time { return l.Session.ExpiresAt }

// Revoked reports whether the session was killed.
func (l *LiveSession) Revoked() bool { return l.revoked.Load() }

// liveCredentials is the live session of id, as the credential service
// sees it.
func (b *Broker) liveCredentials(id string) (credentials.Holder, bool) {
	l, ok := b.live(id)
	if !ok {
		return nil, false
	}
	return l, true
}

// mintStates keeps the minters' sealed state in the meta store.
type mintStates struct{ meta meta.Store }

func (s mintStates) LoadState(ctx context.Context, key string) ([]byte, error) {
	v, err := s.meta.Meta(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	return v, err
}

func (s mintStates) SaveState(ctx context.Context, key string, value []byte) error {
	return s.meta.PutMeta(ctx, key, value)
}
