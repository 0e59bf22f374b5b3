package config

import "time"

// EnvCredential (source: env) reads the secret from the broker's
// environment variable Name.
type EnvCredential struct {
	Name string `yaml:"name"`
}

// FileCredential (source: file) reads the secret from the file Path
// (again every 10 s, so a rotated one is held).
type FileCredential struct {
	Path string `yaml:"path"`
}

// VaultCredential (source: vault) reads the secret from a Vault KV v2
// field.
type VaultCredential struct {
	Path    string        `yaml:"path"`    // the KV v2 path (secret/data/github)
	Field   string        `yaml:"field"`   // the field holding the secret
	Version int           `yaml:"version"` // pin a KV version (default: latest)
	Refresh time.Duration `yaml:"refresh"` // re-read at least this often, so rotations reach sandboxes (default 30s)
}

func (*EnvCredential) Source() string   { return "env" }
func (*FileCredential) Source() string  { return "file" }
func (*VaultCredential) Source() string { return "vault" }

func (c *EnvCredential) validate(f string, _ bool) error {
	if c.Name == "" {
		return fieldErr(f+".name", "is required for source env")
	}
	return nil
}

func (c *FileCredential) validate(f string, _ bool) error {
	if c.Path == "" {
		return fieldErr(f+".path", "is required for source file")
	}
	return nil
}

func (c *VaultCredential) validate(f string, hasVault bool) error {
	var e errs
	e.join(needsVault(f, "vault", hasVault))
	e.join(validateKV(f, c.Path, c.Version, c.Refresh))
	if c.Field == "" {
		e.add(f+".field", "is required for source vault (the field holding the secret)")
	}
	return e.err()
}

// validateKV checks the fields every Vault KV read has.
func validateKV(f, path string, version int, refresh time.Duration) error {
	var e errs
	if path == "" {
		e.add(f+".path", "is required for source vault (the KV v2 path, e.g. secret/data/github)")
	}
	if version < 0 {
		e.add(f+".version", "must not be negative")
	}
	if refresh < 0 {
		e.add(f+".refresh", "must not be negative")
	}
	return e.err()
}
