package config

import (
	"reflect"

	"go.yaml.in/yaml/v3"
)

// Credential is an upstream's credential: the one source its source: key
// selects, with that source's own keys beside it
// ({source: env, name: GITHUB_TOKEN}). Which sources apply depends on the
// upstream's type (sourcesFor). In Go:
// Credential{Source: &FileCredential{Path: "/run/secrets/key"}}.
type Credential struct {
	Source CredentialSource // nil: none configured

	// node is the credential's mapping as read, until its upstream's type
	// says which source types apply (resolve).
	node *yaml.Node
	path string
}

// CredentialSource is one kind of credential (one value of source:):
// EnvCredential, FileCredential, VaultCredential, GitHubAppCredential,
// OAuth2Credential for http upstreams; AWSEnvCredential,
// AWSVaultCredential, AWSChainCredential, VaultAWSCredential for aws ones.
type CredentialSource interface {
	// Source is the value of the source: key that selects it.
	Source() string
	// validate checks the source's fields, f its path (upstreams[0].credential);
	// hasVault says whether the config has a vault: section.
	validate(f string, hasVault bool) error
	// build makes the runtime source (sources_build.go).
	build(f string, b *builder) (built, error)
}

// sourceTable lists the sources one place accepts.
type sourceTable struct {
	where   string // "" or " of an aws upstream", for "unknown field for source env"
	names   string // for messages: "env, file or vault"
	sources map[string]func() CredentialSource
	other   map[string]string // a source of another table → why it does not apply here
}

var (
	httpSources = sourceTable{
		names: "env, file, vault, github_app or oauth2",
		sources: map[string]func() CredentialSource{
			"env":        func() CredentialSource { return &EnvCredential{} },
			"file":       func() CredentialSource { return &FileCredential{} },
			"vault":      func() CredentialSource { return &VaultCredential{} },
			"github_app": func() CredentialSource { return &GitHubAppCredential{} },
			"oauth2":     func() CredentialSource { return &OAuth2Credential{} },
		},
		other: map[string]string{"aws": "aws credentials are for aws upstreams", "vault_aws": "vault_aws credentials are for aws upstreams"},
	}
	awsSources = sourceTable{
		where: " of an aws upstream",
		names: "env, vault, aws or vault_aws",
		sources: map[string]func() CredentialSource{
			"env":       func() CredentialSource { return &AWSEnvCredential{} },
			"vault":     func() CredentialSource { return &AWSVaultCredential{} },
			"aws":       func() CredentialSource { return &AWSChainCredential{} },
			"vault_aws": func() CredentialSource { return &VaultAWSCredential{} },
		},
	}
	// valueSources hold one secret: an oauth2 client_secret or refresh_token.
	valueSources = sourceTable{
		names: "env, file or vault",
		sources: map[string]func() CredentialSource{
			"env":   func() CredentialSource { return &EnvCredential{} },
			"file":  func() CredentialSource { return &FileCredential{} },
			"vault": func() CredentialSource { return &VaultCredential{} },
		},
	}
)

// sourcesFor is the table of an upstream of type typ.
func sourcesFor(typ string) sourceTable {
	if typ == "aws" {
		return awsSources
	}
	return httpSources
}

// accepts says whether s is one of the table's source types.
func (t sourceTable) accepts(s CredentialSource) bool {
	mk, ok := t.sources[s.Source()]
	return ok && reflect.TypeOf(mk()) == reflect.TypeOf(s)
}

// refuse is why source name does not apply here.
func (t sourceTable) refuse(name string) string {
	if why, ok := t.other[name]; ok {
		return why
	}
	return "must be " + t.names
}

// decodeYAML keeps the credential's mapping for resolve.
func (c *Credential) decodeYAML(d *decoder, n *yaml.Node, path string) {
	*c = Credential{}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
	case n.Kind != yaml.MappingNode:
		d.fail(path, "must be a mapping (source: ..., and its keys), not %s", d.describe(n))
	default:
		c.node, c.path = n, path
	}
}

// resolve decodes the credential's mapping into the source type its
// source: key selects in t (none when it has no source: key: the validator
// says it is required), then the credentials nested in it.
func (c *Credential) resolve(d *decoder, t sourceTable) {
	n := c.node
	if n == nil {
		return
	}
	c.node = nil
	var name *yaml.Node
	ps, _, _ := pairs(n, 0) // a bad merge: said by mapping
	for _, p := range ps {
		if p.key.Value == "source" {
			name = p.value
		}
	}
	if name == nil {
		return
	}
	f := c.path + ".source"
	if name.Kind != yaml.ScalarNode {
		d.fail(f, "must be a string, not %s", d.describe(name))
		return
	}
	mk, ok := t.sources[name.Value]
	if !ok {
		d.fail(f, "%s", t.refuse(name.Value))
		return
	}
	src := mk()
	d.mapping(n, reflect.ValueOf(src).Elem(), c.path, []string{"source"}, " for source "+name.Value+t.where)
	c.Source = src
	if o, ok := src.(*OAuth2Credential); ok {
		for _, nested := range []*Credential{o.ClientSecret, o.RefreshToken} {
			if nested != nil {
				nested.resolve(d, valueSources)
			}
		}
	}
}

// validateIn checks the credential at f against the sources of t.
func (c *Credential) validateIn(f string, t sourceTable, hasVault bool) error {
	switch {
	case c.Source == nil && t.names == valueSources.names:
		return fieldErr(f+".source", "must be %s", t.names)
	case c.Source == nil:
		return fieldErr(f+".source", "is required (%s)", t.names)
	case !t.accepts(c.Source):
		if _, ok := t.sources[c.Source.Source()]; ok { // built in Go with the other type's form
			return fieldErr(f+".source", "%s: the form of another type of upstream", c.Source.Source())
		}
		return fieldErr(f+".source", "%s", t.refuse(c.Source.Source()))
	}
	return c.Source.validate(f, hasVault)
}

// needsVault is the error of a source that reads Vault in a config
// without a vault: section.
func needsVault(f, source string, hasVault bool) error {
	if hasVault {
		return nil
	}
	return fieldErr(f+".source", "%s needs a top-level vault: section", source)
}
