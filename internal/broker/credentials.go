package broker

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/credentials"
	"github.com/airlock-broker/airlock/internal/meta"
)

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
