package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// FakeMinter is an upstream.Minter for tests: it issues tokens living a
// minute (never past the session), renews by extending them, records
// revocations, and fails every mint with Fail when it is set.
type FakeMinter struct {
	Fail error

	mu      sync.Mutex
	n       int
	revoked map[string]bool
}

// Mint issues lease-N with a secret naming N and the number of rules.
func (f *FakeMinter) Mint(_ context.Context, sc upstream.Scope) (upstream.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		return upstream.Lease{}, f.Fail
	}
	f.n++
	if len(sc.Rules) == 0 {
		return upstream.Lease{}, errors.New("empty scope")
	}
	return upstream.Lease{Secret: upstream.NewSecret(fmt.Sprintf("minted-secret-%d-%d", f.n, len(sc.Rules))),
		ID: fmt.Sprintf("lease-%d", f.n), Expires: LeaseEnd(sc)}, nil
}

// Renew extends the lease.
func (f *FakeMinter) Renew(_ context.Context, sc upstream.Scope, l upstream.Lease) (upstream.Lease, error) {
	l.Expires = LeaseEnd(sc)
	return l, nil
}

// Revoke records the lease as revoked.
func (f *FakeMinter) Revoke(_ context.Context, l upstream.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revoked == nil {
		f.revoked = map[string]bool{}
	}
	f.revoked[l.ID] = true
	return nil
}

// Describe names the minter.
func (f *FakeMinter) Describe() string { return "fake-minter" }

// Revoked reports whether lease id was revoked.
func (f *FakeMinter) Revoked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.revoked[id]
}

// Minted is how many leases were minted.
func (f *FakeMinter) Minted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// LeaseEnd is a lease's end: a minute from the scope's now, never past
// the session's expiry.
func LeaseEnd(sc upstream.Scope) time.Time {
	if e := sc.Now.Add(time.Minute); e.Before(sc.Expires) {
		return e
	}
	return sc.Expires
}
