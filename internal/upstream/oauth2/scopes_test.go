package oauth2_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
)

func TestOAuth2Scopes(t *testing.T) {
	mustRule := func(key string, scopes ...string) oauth2.ScopeRule {
		t.Helper()
		sr, err := oauth2.ParseScopeRule(key, scopes)
		if err != nil {
			t.Fatal(err)
		}
		return sr
	}
	scopesFor := []oauth2.ScopeRule{
		mustRule("GET /repos/**", "repo:read"),
		mustRule("POST /repos/*/*/issues", "issues:write"),
		mustRule("* /user", "user"),
	}
	configured := []string{"user", "repo:read", "issues:write", "admin"}
	rule := func(method, path string) grants.Rule { return grants.Rule{Method: method, Path: path} }
	tests := []struct {
		name      string
		rules     []grants.Rule
		scopes    []string
		scopesFor []oauth2.ScopeRule
		want      []string
		wantErr   bool
	}{
		{name: "no scopes_for: the configured ones", rules: []grants.Rule{rule("GET", "/x")}, scopes: configured, want: configured},
		{name: "one read rule", rules: []grants.Rule{rule("GET", "/repos/acme/widgets")}, scopes: configured, scopesFor: scopesFor, want: []string{"repo:read"}},
		{name: "a variable under **", rules: []grants.Rule{rule("GET", "/repos/{owner}/{repo}/pulls")}, scopes: configured, scopesFor: scopesFor, want: []string{"repo:read"}},
		{name: "a variable matched by *", rules: []grants.Rule{rule("POST", "/repos/{owner}/widgets/issues")}, scopes: configured, scopesFor: scopesFor, want: []string{"issues:write"}},
		{name: "union in the configured order", rules: []grants.Rule{rule("POST", "/repos/a/b/issues"), rule("GET", "/user"), rule("GET", "/repos/a/b")}, scopes: configured, scopesFor: scopesFor, want: []string{"user", "repo:read", "issues:write"}},
		{name: "method must match", rules: []grants.Rule{rule("DELETE", "/repos/a/b")}, scopes: configured, scopesFor: scopesFor, want: configured},
		{name: "a rule's glob is wider than the pattern's *", rules: []grants.Rule{rule("POST", "/repos/*/**")}, scopes: configured, scopesFor: scopesFor, want: configured},
		{name: "a longer path than the pattern", rules: []grants.Rule{rule("POST", "/repos/a/b/issues/1")}, scopes: configured, scopesFor: scopesFor, want: configured},
		{name: "a rule's method * needs a pattern's *", rules: []grants.Rule{rule("*", "/user")}, scopes: configured, scopesFor: scopesFor, want: []string{"user"}},
		{name: "fail-uncovered without configured scopes", rules: []grants.Rule{rule("GET", "/other")}, scopesFor: scopesFor, wantErr: true},
		{name: "no configured scopes: the mapped ones", rules: []grants.Rule{rule("GET", "/repos/a/b")}, scopesFor: scopesFor, want: []string{"repo:read"}},
		{name: "fail-mapped scope not configured", rules: []grants.Rule{rule("GET", "/repos/a/b")}, scopes: []string{"admin"}, scopesFor: scopesFor, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := oauth2.Scopes(tt.rules, tt.scopes, tt.scopesFor)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("scopes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseScopeRule(t *testing.T) {
	for _, key := range []string{"GET", "GET repos", "/repos/**", "GET /a/**/b", "GET /a/x*", "GET /{repo}"} {
		if _, err := oauth2.ParseScopeRule(key, []string{"s"}); err == nil {
			t.Errorf("%q parsed", key)
		}
	}
	if _, err := oauth2.ParseScopeRule("GET /a", nil); err == nil {
		t.Error("a pattern with no scope parsed")
	}
}
