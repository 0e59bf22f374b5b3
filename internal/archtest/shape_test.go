package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository, from this package's folder.
const repoRoot = "../.."

// testKits are packages of test support: their functions are tests' code,
// not the product's.
var testKits = []string{"internal/brokertest", "internal/store/storetest", "internal/pgtest", "internal/testvault", "internal/upstream/sourcetest"}

// core are the packages of the domain and the pipeline (and the credential
// sources under internal/upstream): a type name means one thing among them.
var core = []string{"internal/fault", "internal/ids", "internal/printable", "internal/credentials", "internal/killswitch", "internal/meta", "internal/auditlog", "internal/apitokens", "internal/changefeed", "internal/usage", "internal/grants", "internal/session", "internal/auth", "internal/audit", "internal/approval", "internal/gate", "internal/sessions",
	"internal/upstream", "internal/proxyca", "internal/clock", "internal/broker", "internal/store"}

// goFiles calls fn with every production Go file under dir (tests, test
// kits and the SDKs' dependencies skipped) and its package's folder.
func goFiles(t *testing.T, dir string, fn func(path, pkg string, f *ast.File, fset *token.FileSet)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			if d.Name() == "node_modules" || d.Name() == "testdata" || slices.Contains(testKits, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		fn(rel, filepath.Dir(rel), f, fset)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoLongFunctions: no production function is over 100 lines; a long
// one is split into steps with names.
func TestNoLongFunctions(t *testing.T) {
	n := 0
	for _, dir := range []string{"internal", "cmd", "client"} {
		goFiles(t, dir, func(path, _ string, f *ast.File, fset *token.FileSet) {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n++
				if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > 100 {
					t.Errorf("%s: %s is %d lines (at most 100)", path, fd.Name.Name, lines)
				}
			}
		})
	}
	if n < 500 {
		t.Fatalf("only %d functions found: not the repository", n)
	}
}

// roles are the names a service package gives its parts by convention,
// read with the package's name (killswitch.Service, auditlog.Store,
// credentials.Config): each package has its own, by design.
var roles = []string{"Service", "Store", "Config"}

// TestNoTypeNamedTwice: among the core packages an exported type name (or
// alias) is declared once, so a name is one concept; a service package's
// role names (roles) aside.
func TestNoTypeNamedTwice(t *testing.T) {
	where := map[string][]string{}
	for _, dir := range core {
		goFiles(t, dir, func(path, pkg string, f *ast.File, _ *token.FileSet) {
			if !slices.Contains(core, pkg) && !strings.HasPrefix(pkg, "internal/upstream/") {
				return // an adapter below a core folder (internal/store/boltstore, approval/web)
			}
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, s := range gd.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() && !slices.Contains(where[ts.Name.Name], pkg) {
						where[ts.Name.Name] = append(where[ts.Name.Name], pkg)
					}
				}
			}
		})
	}
	if len(where) < 50 {
		t.Fatalf("only %d type names found: not the core", len(where))
	}
	for name, pkgs := range where {
		if len(pkgs) > 1 && !slices.Contains(roles, name) {
			t.Errorf("type %s is declared in %v", name, pkgs)
		}
	}
}
