package broker

import (
	"context"
	"errors"
)

// MintedCredential is the session's minted credential on the upstream, as
// Send gets it (benchmarks of the cache hit and miss).
func MintedCredential(ctx context.Context, b *Broker, sessionID, upstreamName string) error {
	l, ok := b.live(sessionID)
	u := b.upstreams[upstreamName]
	if !ok || u == nil || u.Minter == nil {
		return errors.New("no such session or minted upstream")
	}
	_, err := b.mint.credential(ctx, l, u)
	return err
}

// ForgetMinted drops the session's leases without revoking them (a
// benchmark's cache miss on the next call).
func ForgetMinted(b *Broker, sessionID string) {
	b.mint.mu.Lock()
	delete(b.mint.entries, sessionID)
	b.mint.mu.Unlock()
}
