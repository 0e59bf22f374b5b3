package vault_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/clock"
	"github.com/airlock-broker/airlock/internal/testvault"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/vault"
)

// The Vault KV cache's refresh bound is measured on the injected clock: a
// value is served from memory until the clock reaches the bound, whatever
// happens in Vault meanwhile, and read again (or failed closed) from then.
func TestVaultCacheOnInjectedClock(t *testing.T) {
	v := testvault.Start(t, "test-root-token")
	v.PutKV("secret", "github", map[string]any{"token": "CANARY-vault-v1"})
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	c, err := vault.New(vault.Config{Address: v.Addr, Timeout: 2 * time.Second, Now: clk.Now,
		Auth: vault.Auth{Method: "token", Token: v.Token}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	src, err := c.KV("secret/github", "token", 0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fetch := func(want string) {
		t.Helper()
		got, err := src.Fetch(ctx)
		if err != nil || got.Reveal() != want {
			t.Fatalf("Fetch = %q, %v; want the value %q", got.Reveal(), err, want)
		}
	}
	fetch("CANARY-vault-v1")
	v.PutKV("secret", "github", map[string]any{"token": "CANARY-vault-v2"})
	fetch("CANARY-vault-v1") // cached
	clk.Advance(time.Minute - time.Nanosecond)
	fetch("CANARY-vault-v1") // still within the bound
	clk.Advance(time.Nanosecond)
	fetch("CANARY-vault-v2") // read again at the bound

	v.Stop()
	fetch("CANARY-vault-v2") // Vault is down, the value is within its bound
	clk.Advance(time.Minute)
	if _, err := src.Fetch(ctx); !errors.Is(err, upstream.ErrCredentialUnavailable) {
		t.Fatalf("past the bound with Vault down: %v, want ErrCredentialUnavailable", err)
	}
}
