package vault

import (
	"context"
	"errors"
	"fmt"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-broker/airlock/internal/upstream"
)

var (
	_ upstream.Minter                 = (*AWSEngine)(nil)
	_ upstream.AWSCredentialsProvider = AWSKeys{}
)

// AWSEngine mints AWS credentials per session from Vault's AWS secrets
// engine (credential source vault_aws): <mount>/creds/<role> (an IAM user's
// keys, leased: renewed through sys/leases/renew, revoked through
// sys/leases/revoke, which deletes the user) or <mount>/sts/<role> (STS
// credentials, not renewable: minted anew, their ttl the session's
// remaining life, within the role's maximum).
type AWSEngine struct {
	v     *Client
	mount string
	role  string
	sts   bool
}

// AWSEngine is the minter of role on the AWS engine mounted at mount;
// credType is "creds" (IAM user keys) or "sts".
func (v *Client) AWSEngine(mount, role, credType string) (*AWSEngine, error) {
	if mount == "" || role == "" {
		return nil, errors.New("vault_aws needs mount and role")
	}
	switch credType {
	case "", "creds":
		return &AWSEngine{v: v, mount: mount, role: role}, nil
	case "sts":
		return &AWSEngine{v: v, mount: mount, role: role, sts: true}, nil
	}
	return nil, fmt.Errorf("vault_aws type must be creds or sts, not %q", credType)
}

// Describe implements upstream.Minter.
func (m *AWSEngine) Describe() string {
	kind := "creds"
	if m.sts {
		kind = "sts"
	}
	return "vault_aws:" + m.mount + "/" + kind + "/" + m.role
}

// Mint implements upstream.Minter.
func (m *AWSEngine) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	fail := func(cause, why string) (upstream.Lease, error) {
		return upstream.Lease{}, fmt.Errorf("%s: %w", m.Describe(), upstream.Unavailable(cause, errors.New(why)))
	}
	path := m.mount + "/creds/" + m.role
	var data map[string][]string
	if m.sts {
		path = m.mount + "/sts/" + m.role
		ttl := max(sc.Remaining(), upstream.MinSTSDuration) // Vault clamps it to the role's maximum
		data = map[string][]string{"ttl": {fmt.Sprintf("%ds", int64(ttl/time.Second))}}
	}
	var sec *vaultapi.Secret
	err := m.v.withLogin(ctx, func() (err error) {
		sec, err = m.v.client.Logical().ReadWithDataWithContext(ctx, path, data)
		return err
	})
	if err != nil {
		return fail(m.v.cause(err), failure(err))
	}
	if sec == nil {
		return fail("Vault returned no credentials", "no credentials returned")
	}
	ak, _ := sec.Data["access_key"].(string)
	sk, _ := sec.Data["secret_key"].(string)
	st, _ := sec.Data["security_token"].(string) // sts; nil for an IAM user's keys
	if ak == "" || sk == "" {
		return fail("Vault's credentials lack access_key or secret_key", "access_key or secret_key missing")
	}
	l := upstream.Lease{Secret: upstream.NewSecret(sk), ID: sec.LeaseID,
		AWS: upstream.AWSCredentials{AccessKeyID: ak, SecretAccessKey: sk, SessionToken: st, Source: m.Describe()}}
	if sec.LeaseDuration > 0 {
		l.Expires = sc.Now.Add(time.Duration(sec.LeaseDuration) * time.Second)
		l.AWS.CanExpire, l.AWS.Expires = true, l.Expires
	}
	if st != "" {
		l.Extra = append(l.Extra, upstream.NewSecret(st))
	}
	return l, nil
}

// Renew implements upstream.Minter: an IAM user's lease is extended up to the
// session's end; STS credentials are minted anew (the old lease revoked).
func (m *AWSEngine) Renew(ctx context.Context, sc upstream.Scope, l upstream.Lease) (upstream.Lease, error) {
	if m.sts || l.ID == "" {
		return m.Mint(ctx, sc)
	}
	var sec *vaultapi.Secret
	err := m.v.withLogin(ctx, func() (err error) {
		sec, err = m.v.client.Sys().RenewWithContext(ctx, l.ID, int(max(sc.Remaining(), time.Second)/time.Second))
		return err
	})
	if err != nil {
		return upstream.Lease{}, fmt.Errorf("%s: renew: %w", m.Describe(), upstream.Unavailable(m.v.cause(err), errors.New(failure(err))))
	}
	if sec != nil && sec.LeaseDuration > 0 {
		l.Expires = sc.Now.Add(time.Duration(sec.LeaseDuration) * time.Second)
		l.AWS.Expires = l.Expires
	}
	return l, nil
}

// Revoke implements upstream.Minter: the lease is revoked in Vault (for an IAM
// user, Vault deletes its keys and the user).
func (m *AWSEngine) Revoke(ctx context.Context, l upstream.Lease) error {
	if l.ID == "" {
		return nil
	}
	err := m.v.withLogin(ctx, func() error { return m.v.client.Sys().RevokeWithContext(ctx, l.ID) })
	if err != nil {
		return fmt.Errorf("%s: revoke: %s", m.Describe(), failure(err))
	}
	return nil
}

// AWSKeys are static AWS keys read from two fields of a KV v2
// secret (an upstream.AWSCredentialsProvider).
type AWSKeys struct{ Access, Secret *KV }

// Retrieve implements upstream.AWSCredentialsProvider.
func (v AWSKeys) Retrieve(ctx context.Context) (upstream.AWSCredentials, error) {
	ak, err := v.Access.Fetch(ctx)
	if err != nil {
		return upstream.AWSCredentials{}, err
	}
	sk, err := v.Secret.Fetch(ctx)
	if err != nil {
		return upstream.AWSCredentials{}, err
	}
	return upstream.AWSCredentials{AccessKeyID: ak.Reveal(), SecretAccessKey: sk.Reveal(), Source: "vault"}, nil
}
