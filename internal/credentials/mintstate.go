package credentials

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// StateStore keeps small values under a key: the minters' sealed state
// (the broker's MetaStore).
type StateStore interface {
	// LoadState returns the value last saved under key, or nil and no
	// error for a key never saved.
	LoadState(ctx context.Context, key string) ([]byte, error)
	// SaveState creates or replaces the value under key; it is durable
	// when it returns.
	SaveState(ctx context.Context, key string, value []byte) error
}

// mintStatePrefix prefixes the StateStore key of an upstream's minter state
// (upstream.MintState): "minted_state/" + the upstream's name.
const mintStatePrefix = "minted_state/"

// sealedMintState is an upstream's minter state (an OAuth2 refresh token)
// in the StateStore, sealed with AES-256-GCM under a key derived from the
// installation secret and bound to its key (a value moved to another
// upstream does not open).
type sealedMintState struct {
	meta StateStore
	key  string
	aead cipher.AEAD
}

// mintStateVersion prefixes every sealed value, so the format can change.
const mintStateVersion = 1

// bindMintStates gives every stateful minter its sealed state.
func bindMintStates(ups map[string]*upstream.Upstream, meta StateStore, key []byte) error {
	block, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return err
	}
	for name, u := range ups {
		if u == nil {
			continue
		}
		if s, ok := u.Minter.(upstream.StatefulMinter); ok {
			s.BindState(&sealedMintState{meta: meta, key: mintStatePrefix + name, aead: aead})
		}
	}
	return nil
}

// Load implements upstream.MintState.
func (s *sealedMintState) Load(ctx context.Context) ([]byte, error) {
	v, err := s.meta.LoadState(ctx, s.key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.key, err)
	}
	if v == nil {
		return nil, nil
	}
	ns := s.aead.NonceSize()
	if len(v) < 1+ns+s.aead.Overhead() || v[0] != mintStateVersion {
		return nil, fmt.Errorf("%s: not a sealed value", s.key)
	}
	out, err := s.aead.Open(nil, v[1:1+ns], v[1+ns:], []byte(s.key))
	if err != nil {
		return nil, fmt.Errorf("%s: the sealed value does not open", s.key)
	}
	return out, nil
}

// Save implements upstream.MintState.
func (s *sealedMintState) Save(ctx context.Context, value []byte) error {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	out := append([]byte{mintStateVersion}, nonce...)
	out = s.aead.Seal(out, nonce, value, []byte(s.key))
	if err := s.meta.SaveState(ctx, s.key, out); err != nil {
		return fmt.Errorf("store %s: %w", s.key, err)
	}
	return nil
}
