package oauth2

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-broker/airlock/internal/grants"
)

// ScopeRule maps the rules a pattern covers to the OAuth2 scopes they need
// (config scopes_for: {"GET /repos/**": [repo:read]}).
type ScopeRule struct {
	Method string   // upper case, or "*" for any
	Path   []string // segments: a literal, "*" (one segment) or a final "**" (the rest)
	Scopes []string
}

// ParseScopeRule parses a scopes_for key ("METHOD /path/glob").
func ParseScopeRule(key string, scopes []string) (ScopeRule, error) {
	method, p, ok := strings.Cut(key, " ")
	if !ok || method == "" || !strings.HasPrefix(p, "/") {
		return ScopeRule{}, errors.New(`must be "METHOD /path" (METHOD may be *)`)
	}
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		if s == "**" && i != len(segs)-1 {
			return ScopeRule{}, errors.New(`"**" must be the last segment`)
		}
		if s != "*" && s != "**" && strings.ContainsAny(s, "*{}") {
			return ScopeRule{}, fmt.Errorf("segment %q: a literal, * or **", s)
		}
	}
	if len(scopes) == 0 {
		return ScopeRule{}, errors.New("lists no scope")
	}
	return ScopeRule{Method: strings.ToUpper(method), Path: segs, Scopes: slices.Clone(scopes)}, nil
}

// covers reports whether every request rule r can allow is matched by the
// pattern: the methods agree (the pattern's "*" covers any; a rule's "*"
// only the pattern's), and each of the rule's path segments is matched: a
// literal by itself, "*" or "**"; a variable ({repo}), a pattern or "*" by
// "*" or "**" only; the rule's "**" by "**" only.
func (s ScopeRule) covers(r grants.Rule) bool {
	if s.Method != "*" && !strings.EqualFold(s.Method, r.Method) {
		return false
	}
	segs := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
	for i, want := range s.Path {
		if want == "**" {
			return true
		}
		if i >= len(segs) {
			return false
		}
		got := segs[i]
		switch {
		case got == "**":
			return false
		case want == "*":
		case strings.ContainsAny(got, "*{}"):
			return false
		case got != want:
			return false
		}
	}
	return len(segs) == len(s.Path)
}

// Scopes are the scopes a token for rules asks: with no scopes_for,
// the configured scopes; otherwise the union, over the rules, of the scopes
// of every pattern covering each rule (a rule no pattern covers needs all
// the configured scopes), intersected with the configured ones when any
// are configured, in their order. It fails when that leaves none (asking
// for no scope would get the server's default, often everything).
func Scopes(rules []grants.Rule, scopes []string, scopesFor []ScopeRule) ([]string, error) {
	if len(scopesFor) == 0 {
		return scopes, nil
	}
	need := map[string]bool{}
	all := false
	for _, r := range rules {
		covered := false
		for _, sr := range scopesFor {
			if sr.covers(r) {
				covered = true
				for _, s := range sr.Scopes {
					need[s] = true
				}
			}
		}
		if !covered {
			all = true
		}
	}
	var out []string
	if len(scopes) > 0 {
		for _, s := range scopes {
			if all || need[s] {
				out = append(out, s)
			}
		}
	} else {
		if all {
			return nil, errors.New("a rule is covered by no scopes_for pattern and no scopes are configured")
		}
		for _, sr := range scopesFor { // the configured order, without duplicates
			for _, s := range sr.Scopes {
				if need[s] && !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the grants need no scope the upstream allows")
	}
	return out, nil
}
