package credentials

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// holdTimeout bounds one fetch of a static credential by Hold.
const holdTimeout = 15 * time.Second

// holdRefresh is how often Hold fetches every static credential again.
const holdRefresh = 10 * time.Second

// Hold fetches every static credential now and again every holdRefresh,
// in the background: each is then in the set of held secrets (Secrets)
// before any call, and a rotated one (a file rewritten, a new Vault version
// once the source's cache refreshes) within holdRefresh even if no call
// fetches it, so an upstream that echoes the credential of another upstream
// this broker has not called (both front one API) is scrubbed of it too.
// It is called once; Close stops it.
func (s *Service) Hold() {
	ctx, cancel := context.WithCancel(context.Background())
	s.holding.cancel = cancel
	var static []*upstream.Upstream
	for _, u := range s.ups {
		if u.Minter == nil && (u.Source != nil || u.AWS != nil) {
			static = append(static, u)
		}
	}
	if len(static) == 0 {
		return
	}
	fetchAll := func() {
		var wg sync.WaitGroup
		for _, u := range static {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fctx, done := context.WithTimeout(ctx, holdTimeout)
				defer done()
				_, _ = u.Credential(fctx)
			}()
		}
		wg.Wait()
	}
	s.holding.wg.Add(1)
	go func() {
		defer s.holding.wg.Done()
		t := time.NewTicker(holdRefresh)
		defer t.Stop()
		for {
			fetchAll()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
