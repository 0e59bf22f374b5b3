package config

import (
	"fmt"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// Placeholder configures an upstream's placeholder token (DESIGN §8):
// env names the sandbox's environment variable, format is literal text
// with {random:N} (N characters of [A-Za-z0-9]), e.g. "ghp_{random:36}".
type Placeholder struct {
	Env    string `yaml:"env"`
	Format string `yaml:"format"`
}

// validatePlaceholder parses the upstream's placeholder (http upstreams
// only: an aws upstream's clients sign with the session's aws_credentials).
func (u *Upstream) validatePlaceholder(f string) error {
	if u.Placeholder == nil {
		return nil
	}
	if u.Type == "aws" {
		return fieldErr(f+".placeholder", "applies to http upstreams only (aws clients use the session's aws_credentials)")
	}
	p, err := upstream.ParsePlaceholder(u.Placeholder.Env, u.Placeholder.Format)
	if err != nil {
		return fieldErr(f+".placeholder", "%v", err)
	}
	u.placeholder = p
	return nil
}

// uniquePlaceholder refuses a placeholder variable another upstream
// already names (seen: variable → upstream).
func (u *Upstream) uniquePlaceholder(i int, seen map[string]string) error {
	if u.placeholder == nil {
		return nil
	}
	if other, ok := seen[u.placeholder.Env]; ok {
		return fieldErr(fmt.Sprintf("upstreams[%d].placeholder.env", i), "%s is already the placeholder of upstream %s", u.placeholder.Env, other)
	}
	seen[u.placeholder.Env] = u.Name
	return nil
}
