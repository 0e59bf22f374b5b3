package githubapp_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream/githubapp"
)

func TestNarrowGitHub(t *testing.T) {
	pin := func(v any) grants.Constraint { return grants.Constraint{Pin: v} }
	oneOf := func(v ...any) grants.Constraint { return grants.Constraint{OneOf: v} }
	rule := func(method, path string, cs map[string]grants.Constraint) grants.Rule {
		return grants.Rule{Method: method, Path: path, Constraints: cs}
	}
	perms := map[string]string{"contents": "write", "issues": "admin", "metadata": "read"}
	read := map[string]string{"contents": "read", "issues": "read", "metadata": "read"}
	tests := []struct {
		name      string
		rules     []grants.Rule
		repos     []string
		wantRepos []string
		wantPerms map[string]string
		wantErr   bool
	}{
		{name: "literal repo, read only", rules: []grants.Rule{rule("GET", "/repos/acme/widgets/issues", nil)},
			repos: []string{"widgets", "gadgets"}, wantRepos: []string{"widgets"}, wantPerms: read},
		{name: "pinned variable", rules: []grants.Rule{rule("GET", "/repos/{owner}/{repo}/pulls", map[string]grants.Constraint{"path.repo": pin("gadgets")})},
			repos: []string{"widgets", "gadgets"}, wantRepos: []string{"gadgets"}, wantPerms: read},
		{name: "one_of, a write rule keeps write", rules: []grants.Rule{rule("POST", "/repos/{o}/{r}/issues", map[string]grants.Constraint{"path.r": oneOf("a", "b")})},
			wantRepos: []string{"a", "b"}, wantPerms: perms},
		{name: "one_of narrowed by configured", rules: []grants.Rule{rule("GET", "/repos/{o}/{r}", map[string]grants.Constraint{"path.r": oneOf("a", "b")})},
			repos: []string{"b", "c"}, wantRepos: []string{"b"}, wantPerms: read},
		{name: "free repo variable: the configured ones", rules: []grants.Rule{rule("GET", "/repos/{o}/{r}", nil), rule("GET", "/repos/acme/a", nil)},
			repos: []string{"b", "c"}, wantRepos: []string{"b", "c"}, wantPerms: read},
		{name: "pattern only: the configured ones", rules: []grants.Rule{rule("GET", "/repos/{o}/{r}", map[string]grants.Constraint{"path.r": {Pattern: "a.*"}})},
			repos: []string{"b"}, wantRepos: []string{"b"}, wantPerms: read},
		{name: "non-repo rules do not widen", rules: []grants.Rule{rule("GET", "/user", nil), rule("GET", "/repos/acme/a/issues", nil)},
			repos: []string{"a", "b"}, wantRepos: []string{"a"}, wantPerms: read},
		{name: "no repo rule: the configured ones", rules: []grants.Rule{rule("GET", "/user", nil)},
			repos: []string{"a"}, wantRepos: []string{"a"}, wantPerms: read},
		{name: "fail: named repo outside the configured", rules: []grants.Rule{rule("GET", "/repos/acme/zzz", nil)},
			repos: []string{"a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repos, gotPerms, err := githubapp.Narrow(tt.rules, tt.repos, perms)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error; repos %v", repos)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantRepos, repos); diff != "" {
				t.Errorf("repositories (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPerms, gotPerms); diff != "" {
				t.Errorf("permissions (-want +got):\n%s", diff)
			}
		})
	}
}
