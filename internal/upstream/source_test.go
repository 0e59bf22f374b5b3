package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/testvault"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// fixture is one credential source under the contract, with the means to
// rotate its value and to make it unavailable.
type fixture struct {
	src     upstream.Source
	value   string
	rotate  func(t *testing.T, v string) // nil: the source cannot rotate
	outage  func(t *testing.T)           // nil: the source cannot fail
	recover func(t *testing.T, v string)
	bound   time.Duration // how long a rotation may take to show
}

// sourceContract is what every credential source must do.
func sourceContract(t *testing.T, f fixture) {
	ctx := context.Background()
	got, err := f.src.Fetch(ctx)
	if err != nil || got.Reveal() != f.value {
		t.Fatalf("Fetch = %v, %v; want the planted value", got, err)
	}
	for _, s := range []string{fmt.Sprint(got), fmt.Sprintf("%v %+v %#v %s", got, got, got, got), f.src.Describe()} {
		if strings.Contains(s, f.value) {
			t.Fatalf("the secret shows in %q", s)
		}
	}
	if f.rotate != nil {
		next := f.value + "-rotated"
		f.rotate(t, next)
		deadline := time.Now().Add(f.bound + 5*time.Second)
		for {
			got, err := f.src.Fetch(ctx)
			if err == nil && got.Reveal() == next {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rotation did not reach the source within its bound (%v): %v", f.bound, err)
			}
			<-time.After(f.bound / 10)
		}
		f.value = next
	}
	if f.outage != nil {
		f.outage(t)
		deadline := time.Now().Add(f.bound + 5*time.Second)
		var err error
		for {
			// Past its bound a cached value is never served: the fetch fails closed.
			_, err = f.src.Fetch(ctx)
			if err != nil || time.Now().After(deadline) {
				break
			}
			<-time.After(f.bound / 10)
		}
		if !errors.Is(err, upstream.ErrCredentialUnavailable) {
			t.Fatalf("during the outage Fetch = %v, want ErrCredentialUnavailable", err)
		}
		if strings.Contains(err.Error(), f.value) {
			t.Fatalf("the error carries the secret: %v", err)
		}
		f.recover(t, f.value)
		deadline = time.Now().Add(10 * time.Second)
		for {
			got, err := f.src.Fetch(ctx)
			if err == nil && got.Reveal() == f.value {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the source did not recover by itself: %v", err)
			}
			<-time.After(50 * time.Millisecond)
		}
	}
}

func TestEnvSourceContract(t *testing.T) {
	src, err := upstream.NewEnvSource("K", func(string) string { return "CANARY-env-value" })
	if err != nil {
		t.Fatal(err)
	}
	sourceContract(t, fixture{src: src, value: "CANARY-env-value"})
	if _, err := upstream.NewEnvSource("K", func(string) string { return "" }); err == nil {
		t.Fatal("an unset variable was accepted")
	}
}

func TestFileSourceContract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	write := func(t *testing.T, v string) {
		// Rename into place, as secret managers do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(t, "CANARY-file-value")
	sourceContract(t, fixture{
		src: upstream.NewFileSource(path), value: "CANARY-file-value", bound: 100 * time.Millisecond,
		rotate:  write,
		outage:  func(t *testing.T) { _ = os.Remove(path) },
		recover: write,
	})
}

func newVault(t *testing.T, v *testvault.Server, auth upstream.VaultAuth) *upstream.Vault {
	t.Helper()
	c, err := upstream.NewVault(upstream.VaultConfig{Address: v.Addr, Timeout: 2 * time.Second, Auth: auth}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestVaultSourceContract(t *testing.T) {
	v := testvault.Start(t, "test-root-token")
	v.PutKV("secret", "github", map[string]any{"token": "CANARY-vault-value"})
	client := newVault(t, v, upstream.VaultAuth{Method: "token", Token: v.Token})
	src, err := client.KV("secret/data/github", "token", 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var fetched []upstream.FetchInfo
	src.SetObserver(func(i upstream.FetchInfo) { fetched = append(fetched, i) })
	sourceContract(t, fixture{
		src: src, value: "CANARY-vault-value", bound: 200 * time.Millisecond,
		rotate: func(t *testing.T, val string) { v.PutKV("secret", "github", map[string]any{"token": val}) },
		outage: func(t *testing.T) { v.Stop() },
		recover: func(t *testing.T, val string) {
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
	client := newVault(t, v, upstream.VaultAuth{Method: "approle", RoleID: rid.Data["role_id"].(string), SecretIDFile: secretIDFile})

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
	bad := newVault(t, v, upstream.VaultAuth{Method: "approle", RoleID: "wrong", SecretID: "wrong"})
	src, _ := bad.KV("secret/api", "key", 0, time.Minute)
	if _, err := src.Fetch(ctx); !errors.Is(err, upstream.ErrCredentialUnavailable) {
		t.Fatalf("bad AppRole credentials: %v", err)
	}
}

func TestVaultKubernetesAuthConfig(t *testing.T) {
	// Kubernetes auth cannot run here (no cluster): check that it is wired and
	// fails closed, naming the problem, when the service-account token is missing.
	c, err := upstream.NewVault(upstream.VaultConfig{Address: "http://127.0.0.1:1", Auth: upstream.VaultAuth{
		Method: "kubernetes", Role: "airlock", JWTFile: filepath.Join(t.TempDir(), "missing-token")}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src, _ := c.KV("secret/x", "k", 0, time.Second)
	if _, err := src.Fetch(context.Background()); !errors.Is(err, upstream.ErrCredentialUnavailable) || !strings.Contains(err.Error(), "kubernetes") {
		t.Fatalf("kubernetes login without a token: %v", err)
	}
	if _, err := upstream.NewVault(upstream.VaultConfig{Address: "http://127.0.0.1:1", Auth: upstream.VaultAuth{Method: "ldap"}}, nil); err == nil {
		t.Fatal("an unknown auth method was accepted")
	}
}

func TestAWSSourcesContract(t *testing.T) {
	t.Run("static", func(t *testing.T) {
		sourceContract(t, fixture{src: upstream.AWSSource(upstream.StaticAWSCredentials("AKIAEXAMPLE", "CANARY-aws-static"), "aws:env"), value: "CANARY-aws-static"})
	})
	t.Run("default chain", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "CANARY-aws-chain")
		t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
		p, err := upstream.DefaultAWSCredentials(context.Background(), "us-east-1")
		if err != nil {
			t.Fatal(err)
		}
		sourceContract(t, fixture{src: upstream.AWSSource(p, "aws:default-chain"), value: "CANARY-aws-chain"})
	})
	t.Run("keys in vault", func(t *testing.T) {
		v := testvault.Start(t, "test-root-token")
		v.PutKV("secret", "aws", map[string]any{"access_key": "AKIAEXAMPLE", "secret_key": "CANARY-aws-vault"})
		client := newVault(t, v, upstream.VaultAuth{Method: "token", Token: v.Token})
		ak, _ := client.KV("secret/data/aws", "access_key", 0, 200*time.Millisecond)
		sk, _ := client.KV("secret/data/aws", "secret_key", 0, 200*time.Millisecond)
		put := func(t *testing.T, val string) {
			v.PutKV("secret", "aws", map[string]any{"access_key": "AKIAEXAMPLE", "secret_key": val})
		}
		sourceContract(t, fixture{
			src: upstream.AWSSource(upstream.VaultAWSCredentials{Access: ak, Secret: sk}, "vault:secret/aws"), value: "CANARY-aws-vault",
			bound: 200 * time.Millisecond, rotate: put,
			outage:  func(t *testing.T) { v.Stop() },
			recover: func(t *testing.T, val string) { v.Restart(); put(t, val) },
		})
	})
}

// TestAssumeRoleOnTopOfAnySource runs STS's AssumeRole against a fake STS on
// loopback (AWS itself cannot be reached here): the call is signed with the
// base keys, names the role, and its temporary keys are what the source serves.
func TestAssumeRoleOnTopOfAnySource(t *testing.T) {
	var gotAuth, gotBody string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotAuth, gotBody = r.Header.Get("Authorization"), string(b)
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIATEMP</AccessKeyId><SecretAccessKey>CANARY-temporary</SecretAccessKey><SessionToken>CANARY-session-token</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/airlock-broker</Arn><AssumedRoleId>AROA:airlock</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	defer fake.Close()
	base := upstream.StaticAWSCredentials("AKIABASE", "CANARY-base")
	p := upstream.AssumeRole(base, "us-east-1", "arn:aws:iam::123456789012:role/r", fake.URL)
	sourceContract(t, fixture{src: upstream.AWSSource(p, "aws:assume-role"), value: "CANARY-temporary"})
	if !strings.Contains(gotAuth, "Credential=AKIABASE/") || !strings.Contains(gotBody, "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fr") {
		t.Fatalf("STS call: auth %q body %q", gotAuth, gotBody)
	}
	c, err := p.Retrieve(context.Background())
	if err != nil || c.SessionToken != "CANARY-session-token" {
		t.Fatalf("temporary credentials: %+v %v", c.AccessKeyID, err)
	}
}
