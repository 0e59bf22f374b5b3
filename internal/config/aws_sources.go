package config

import (
	"strings"
	"time"
)

// The credential sources of aws upstreams: a key pair, or the SDK's chain,
// optionally assuming a role; or Vault's AWS secrets engine.

// AWSEnvCredential (source: env) reads the key pair from the broker's
// environment variables AccessKeyName and SecretKeyName.
type AWSEnvCredential struct {
	AccessKeyName string     `yaml:"access_key_name"`
	SecretKeyName string     `yaml:"secret_key_name"`
	AssumeRole    AssumeRole `yaml:"assume_role"`
}

// AWSVaultCredential (source: vault) reads the key pair from two fields of
// a Vault KV v2 secret.
type AWSVaultCredential struct {
	Path           string        `yaml:"path"`
	AccessKeyField string        `yaml:"access_key_field"`
	SecretKeyField string        `yaml:"secret_key_field"`
	Version        int           `yaml:"version"` // pin a KV version (default: latest)
	Refresh        time.Duration `yaml:"refresh"` // re-read at least this often (default 30s)
	AssumeRole     AssumeRole    `yaml:"assume_role"`
}

// AWSChainCredential (source: aws) takes the AWS SDK's default chain
// (environment, shared files, instance or task role).
type AWSChainCredential struct {
	AssumeRole AssumeRole `yaml:"assume_role"`
}

// VaultAWSCredential (source: vault_aws) mints per session from Vault's
// AWS secrets engine.
type VaultAWSCredential struct {
	Mount string `yaml:"mount"` // the engine's mount (default aws)
	Role  string `yaml:"role"`  // the engine's role
	Type  string `yaml:"type"`  // creds (IAM user keys, leased) or sts (default creds)
}

// AssumeRole has a key pair assume a role through STS.
type AssumeRole struct {
	RoleARN     string `yaml:"role_arn"`
	STSEndpoint string `yaml:"sts_endpoint"` // optional, e.g. a VPC endpoint
	// ScopeToGrant mints per session an STS credential whose inline
	// session policy is the session's AWS rules, for its remaining life.
	ScopeToGrant bool          `yaml:"scope_to_grant"`
	MaxDuration  time.Duration `yaml:"max_duration"` // the role's maximum session duration (default 1h)
}

func (*AWSEnvCredential) Source() string   { return "env" }
func (*AWSVaultCredential) Source() string { return "vault" }
func (*AWSChainCredential) Source() string { return "aws" }
func (*VaultAWSCredential) Source() string { return "vault_aws" }

func (c *AWSEnvCredential) validate(f string, _ bool) error {
	var e errs
	if c.AccessKeyName == "" {
		e.add(f+".access_key_name", "is required for source env (the variable holding the access key id)")
	}
	if c.SecretKeyName == "" {
		e.add(f+".secret_key_name", "is required for source env (the variable holding the secret key)")
	}
	e.join(c.AssumeRole.validate(f + ".assume_role"))
	return e.err()
}

func (c *AWSVaultCredential) validate(f string, hasVault bool) error {
	var e errs
	e.join(needsVault(f, "vault", hasVault))
	e.join(validateKV(f, c.Path, c.Version, c.Refresh))
	if c.AccessKeyField == "" {
		e.add(f+".access_key_field", "is required for source vault")
	}
	if c.SecretKeyField == "" {
		e.add(f+".secret_key_field", "is required for source vault")
	}
	e.join(c.AssumeRole.validate(f + ".assume_role"))
	return e.err()
}

func (c *AWSChainCredential) validate(f string, _ bool) error {
	return c.AssumeRole.validate(f + ".assume_role")
}

func (c *VaultAWSCredential) validate(f string, hasVault bool) error {
	var e errs
	e.join(needsVault(f, "vault_aws", hasVault))
	if c.Role == "" {
		e.add(f+".role", "is required for source vault_aws")
	}
	if c.Type != "" && c.Type != "creds" && c.Type != "sts" {
		e.add(f+".type", "must be creds or sts")
	}
	return e.err()
}

func (a *AssumeRole) validate(f string) error {
	var e errs
	if a.RoleARN != "" && !strings.HasPrefix(a.RoleARN, "arn:") {
		e.add(f+".role_arn", "must be an ARN")
	}
	if a.ScopeToGrant && a.RoleARN == "" {
		e.add(f+".scope_to_grant", "needs role_arn")
	}
	if d := a.MaxDuration; d < 0 || (d > 0 && (d < 15*time.Minute || d > 12*time.Hour)) {
		e.add(f+".max_duration", "must be between 15m and 12h")
	}
	return e.err()
}
