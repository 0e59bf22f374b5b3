// Package archtest checks the shape of the import graph: what the domain
// packages must build without.
package archtest

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/airlock-broker/airlock/"

// sdks are the client SDKs of credential issuers: only the credential
// sources' own packages (internal/upstream/vault, awscred, githubapp) may
// import them.
var sdks = []string{
	"github.com/hashicorp/vault/",
	"github.com/aws/aws-sdk-go-v2", // and its service modules
	"github.com/aws/smithy-go",
	"github.com/golang-jwt/jwt",
}

// adapters are the storage drivers and the router: adapters around the
// broker, never under it.
var adapters = []string{
	"go.etcd.io/bbolt",
	"github.com/jackc/pgx",
	"github.com/go-chi/chi",
}

// TestCoreBuildsWithoutSDKs lists, with the go command, every package the
// core, the broker and its services build with (not their tests), and
// fails on any that comes from a credential issuer's SDK or, for the
// broker and its services, from a storage driver or the router, naming
// where it enters: the packages that import it from outside its module.
func TestCoreBuildsWithoutSDKs(t *testing.T) {
	tests := []struct {
		name      string
		pkg       string
		forbidden []string
		// allowedVia names, per forbidden module, the one package of ours
		// that may still bring it (a known debt outside the credential
		// sources): every import of the module from outside it is by that
		// package.
		allowedVia map[string]string
	}{
		{name: "upstream", pkg: "internal/upstream", forbidden: sdks},
		// The credential service holds the SDK-backed sources only as
		// upstream.Source and upstream.Minter, and its state through a port.
		{name: "credentials", pkg: "internal/credentials", forbidden: slices.Concat(sdks, adapters)},
		{name: "broker", pkg: "internal/broker", forbidden: slices.Concat(sdks, adapters),
			// Session tokens are JWTs signed and verified with golang-jwt
			// (internal/session/token.go).
			allowedVia: map[string]string{"github.com/golang-jwt/jwt": module + "internal/session"}},
		// The broker's services, each in its own package, and their ports.
		{name: "killswitch", pkg: "internal/killswitch", forbidden: slices.Concat(sdks, adapters)},
		{name: "meta", pkg: "internal/meta", forbidden: slices.Concat(sdks, adapters)},
		{name: "auditlog", pkg: "internal/auditlog", forbidden: slices.Concat(sdks, adapters)},
		{name: "apitokens", pkg: "internal/apitokens", forbidden: slices.Concat(sdks, adapters)},
		{name: "changefeed", pkg: "internal/changefeed", forbidden: slices.Concat(sdks, adapters)},
		{name: "usage", pkg: "internal/usage", forbidden: slices.Concat(sdks, adapters)},
		{name: "gate", pkg: "internal/gate", forbidden: slices.Concat(sdks, adapters),
			// The Rule-of-Two standing is session.RuleOfTwo (internal/session,
			// whose tokens are golang-jwt's).
			allowedVia: map[string]string{"github.com/golang-jwt/jwt": module + "internal/session"}},
		{name: "sessions", pkg: "internal/sessions", forbidden: slices.Concat(sdks, adapters),
			// A live session is a session.Session (internal/session, whose
			// tokens are golang-jwt's).
			allowedVia: map[string]string{"github.com/golang-jwt/jwt": module + "internal/session"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			importers := deps(t, module+tt.pkg)
			if _, ok := importers[module+tt.pkg]; !ok {
				t.Fatalf("go list did not list %s itself: not a real listing", tt.pkg)
			}
			found := 0
			for _, dep := range slices.Sorted(maps.Keys(importers)) {
				i := slices.IndexFunc(tt.forbidden, func(f string) bool { return strings.HasPrefix(dep, f) })
				if i < 0 {
					continue
				}
				f := tt.forbidden[i]
				var entries []string // importers from outside the module
				for _, by := range importers[dep] {
					if !strings.HasPrefix(by, f) {
						entries = append(entries, by)
					}
				}
				if via, ok := tt.allowedVia[f]; ok && !slices.ContainsFunc(entries, func(p string) bool { return p != via }) {
					continue
				}
				found++
				if len(entries) > 0 {
					t.Errorf("%s builds with %s, imported by %v", tt.pkg, dep, entries)
				}
			}
			if found > 0 {
				t.Errorf("%s builds with %d forbidden packages", tt.pkg, found)
			}
		})
	}
}

// deps maps every package pkg builds with (not its tests) to the packages
// in the build that import it.
func deps(t *testing.T, pkg string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own GOROOT/bin first on PATH
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	importers := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if _, ok := importers[f[0]]; !ok {
			importers[f[0]] = nil
		}
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	return importers
}
