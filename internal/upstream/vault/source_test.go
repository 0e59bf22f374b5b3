package vault_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/testvault"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/sourcetest"
	"github.com/airlock-broker/airlock/internal/upstream/vault"
)

func newVault(t *testing.T, v *testvault.Server, auth vault.Auth) *vault.Client {
	t.Helper()
	c, err := vault.New(vault.Config{Address: v.Addr, Timeout: 2 * time.Second, Auth: auth}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestVaultSourceContract(t *testing.T) {
	v := testvault.Start(t, "test-root-token")
	v.PutKV("secret", "github", map[string]any{"token": "CANARY-vault-value"})
	client := newVault(t, v, vault.Auth{Method: "token", Token: v.Token})
	src, err := client.KV("secret/data/github", "token", 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var fetched []upstream.FetchInfo
	src.SetObserver(func(i upstream.FetchInfo) { fetched = append(fetched, i) })
	sourcetest.Run(t, sourcetest.Fixture{
		Src: src, Value: "CANARY-vault-value", Bound: 200 * time.Millisecond,
		Rotate: func(t *testing.T, val string) { v.PutKV("secret", "github", map[string]any{"token": val}) },
		Outage: func(t *testing.T) { v.Stop() },
		Recover: func(t *testing.T, val string) {
			v.Restart() // a fresh server: same address and token, data written again
			v.PutKV("secret", "github", map[string]any{"token": val})
		},
	})
	if len(fetched) < 3 || fetched[0].Version != 1 {
		t.Fatalf("fetches observed: %+v", fetched)
	}
}

func TestVaultAppRoleAndPinnedVersion(t *testing.T) {
	v := testvault.Start(t, "test-root-token")
	v.PutKV("secret", "api", map[string]any{"key": "CANARY-v1"})
	v.PutKV("secret", "api", map[string]any{"key": "CANARY-v2"})
	root := v.Client()
	ctx := context.Background()
	if err := root.Sys().PutPolicyWithContext(ctx, "read-api", `path "secret/data/api" { capabilities = ["read"] }`); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Logical().WriteWithContext(ctx, "auth/approle/role/broker", map[string]any{"token_policies": "read-api", "token_ttl": "1h"}); err != nil {
		t.Fatal(err)
	}
	rid, err := root.Logical().ReadWithContext(ctx, "auth/approle/role/broker/role-id")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := root.Logical().WriteWithContext(ctx, "auth/approle/role/broker/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	secretIDFile := filepath.Join(t.TempDir(), "secret-id")
	_ = os.WriteFile(secretIDFile, []byte(sid.Data["secret_id"].(string)), 0o600)
	client := newVault(t, v, vault.Auth{Method: "approle", RoleID: rid.Data["role_id"].(string), SecretIDFile: secretIDFile})

	latest, _ := client.KV("secret/api", "key", 0, time.Minute)
	if got, err := latest.Fetch(ctx); err != nil || got.Reveal() != "CANARY-v2" {
		t.Fatalf("latest through AppRole: %v %v", got, err)
	}
	pinned, _ := client.KV("secret/api", "key", 1, time.Minute)
	if got, err := pinned.Fetch(ctx); err != nil || got.Reveal() != "CANARY-v1" {
		t.Fatalf("pinned version 1: %v %v", got, err)
	}
	denied, _ := client.KV("secret/other", "key", 0, time.Minute)
	if _, err := denied.Fetch(ctx); !errors.Is(err, upstream.ErrCredentialUnavailable) {
		t.Fatalf("a path the policy does not grant: %v", err)
	}
	missing, _ := client.KV("secret/api", "nope", 0, time.Minute)
	if _, err := missing.Fetch(ctx); !errors.Is(err, upstream.ErrCredentialUnavailable) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("a missing field: %v", err)
	}
	bad := newVault(t, v, vault.Auth{Method: "approle", RoleID: "wrong", SecretID: "wrong"})
	src, _ := bad.KV("secret/api", "key", 0, time.Minute)
	if _, err := src.Fetch(ctx); !errors.Is(err, upstream.ErrCredentialUnavailable) {
		t.Fatalf("bad AppRole credentials: %v", err)
	}
}

func TestVaultKubernetesAuthConfig(t *testing.T) {
	// Kubernetes auth cannot run here (no cluster): check that it is wired and
	// fails closed, naming the problem, when the service-account token is missing.
	c, err := vault.New(vault.Config{Address: "http://127.0.0.1:1", Auth: vault.Auth{
		Method: "kubernetes", Role: "airlock", JWTFile: filepath.Join(t.TempDir(), "missing-token")}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src, _ := c.KV("secret/x", "k", 0, time.Second)
	if _, err := src.Fetch(context.Background()); !errors.Is(err, upstream.ErrCredentialUnavailable) || !strings.Contains(err.Error(), "kubernetes") {
		t.Fatalf("kubernetes login without a token: %v", err)
	}
	if _, err := vault.New(vault.Config{Address: "http://127.0.0.1:1", Auth: vault.Auth{Method: "ldap"}}, nil); err == nil {
		t.Fatal("an unknown auth method was accepted")
	}
}

func TestVaultAWSCredentialsContract(t *testing.T) {
	v := testvault.Start(t, "test-root-token")
	v.PutKV("secret", "aws", map[string]any{"access_key": "AKIAEXAMPLE", "secret_key": "CANARY-aws-vault"})
	client := newVault(t, v, vault.Auth{Method: "token", Token: v.Token})
	ak, _ := client.KV("secret/data/aws", "access_key", 0, 200*time.Millisecond)
	sk, _ := client.KV("secret/data/aws", "secret_key", 0, 200*time.Millisecond)
	put := func(t *testing.T, val string) {
		v.PutKV("secret", "aws", map[string]any{"access_key": "AKIAEXAMPLE", "secret_key": val})
	}
	sourcetest.Run(t, sourcetest.Fixture{
		Src: upstream.AWSSource(vault.AWSKeys{Access: ak, Secret: sk}, "vault:secret/aws"), Value: "CANARY-aws-vault",
		Bound: 200 * time.Millisecond, Rotate: put,
		Outage:  func(t *testing.T) { v.Stop() },
		Recover: func(t *testing.T, val string) { v.Restart(); put(t, val) },
	})
}
