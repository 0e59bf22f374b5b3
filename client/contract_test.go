package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The spec's operations and problem codes: the one contract of every client.
type contract struct {
	all      map[string]bool // every operationId
	required map[string]bool // every operationId outside the ui tag (the reviewers' HTML pages)
	codes    []string        // the Problem schema's code enum
}

func readContract(t *testing.T) contract {
	t.Helper()
	data, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `yaml:"enum"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"Problem"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}
	c := contract{all: map[string]bool{}, required: map[string]bool{}, codes: spec.Components.Schemas.Problem.Properties.Code.Enum}
	camel := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	for path, item := range spec.Paths {
		for m, node := range item {
			if !methods[m] {
				continue
			}
			var op struct {
				OperationID string   `yaml:"operationId"`
				Tags        []string `yaml:"tags"`
			}
			if err := node.Decode(&op); err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			switch {
			case op.OperationID == "":
				t.Errorf("%s %s has no operationId", strings.ToUpper(m), path)
			case !camel.MatchString(op.OperationID):
				t.Errorf("%s %s: operationId %q is not camelCase", strings.ToUpper(m), path, op.OperationID)
			case c.all[op.OperationID]:
				t.Errorf("%s %s: operationId %q is not unique", strings.ToUpper(m), path, op.OperationID)
			}
			c.all[op.OperationID] = true
			if !contains(op.Tags, "ui") {
				c.required[op.OperationID] = true
			}
		}
	}
	if len(c.required) == 0 || len(c.codes) == 0 {
		t.Fatal("read no operations or no problem codes from api/openapi.yaml")
	}
	return c
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// check compares what a client implements (operationId → its method) with the contract.
func (c contract) check(t *testing.T, client string, got map[string][]string) {
	t.Helper()
	var missing, unknown []string
	for id := range c.required {
		if len(got[id]) == 0 {
			missing = append(missing, id)
		}
	}
	for id, where := range got {
		if !c.all[id] {
			unknown = append(unknown, id+" ("+strings.Join(where, ", ")+")")
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("%s covers no method for these operations of api/openapi.yaml: %s", client, strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		t.Errorf("%s names operationIds that api/openapi.yaml does not have: %s", client, strings.Join(unknown, ", "))
	}
}

func (c contract) checkErrors(t *testing.T, client string, classes map[string]string) {
	t.Helper()
	for _, code := range c.codes {
		want := camelCase(code)
		if got, ok := classes[code]; !ok {
			t.Errorf("%s has no error class for problem code %s (want %s)", client, code, want)
		} else if got != want {
			t.Errorf("%s: the class of problem code %s is %s, want %s", client, code, got, want)
		}
	}
	for code, class := range classes {
		if !contains(c.codes, code) {
			t.Errorf("%s: class %s is for %q, not a problem code of the Problem schema", client, class, code)
		}
	}
}

func camelCase(code string) string {
	var b strings.Builder
	for _, w := range strings.Split(code, "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

var idList = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)

// goOperations reads the "operationId: a, b" lines of the doc comments of the
// functions and methods of package client.
func goOperations(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Doc == nil || !fn.Name.IsExported() {
				continue
			}
			for _, line := range strings.Split(fn.Doc.Text(), "\n") {
				if rest, ok := strings.CutPrefix(line, "operationId:"); ok {
					for _, id := range idList.FindAllString(rest, -1) {
						got[id] = append(got[id], fn.Name.Name)
					}
				}
			}
		}
	}
	return got
}

func readSources(t *testing.T, dir, ext string) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil || len(names) == 0 {
		t.Fatalf("no %s sources in %s (%v)", ext, dir, err)
	}
	out := map[string]string{}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = string(data)
	}
	return out
}

var (
	// @operation("a", "b") decorating a def (other decorators may sit between).
	pyOperation = regexp.MustCompile(`(?m)^[ \t]*@operation\(([^)]*)\)\s*\n(?:[ \t]*@.*\n)*[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)`)
	pyString    = regexp.MustCompile(`"([A-Za-z][A-Za-z0-9]*)"`)
	// class X(APIError): with an optional docstring, then CODE = "code".
	pyErrorClass = regexp.MustCompile(`(?m)^class (\w+)\(APIError\):\s*\n(?:[ \t]+"""(?s:.*?)"""\s*\n)?\s*CODE = "(\w+)"`)
	// A JSDoc comment right before a method or function declaration.
	tsDoc       = regexp.MustCompile(`/\*\*((?s:.*?))\*/\s*(?:export\s+)?(?:async\s+)?(?:function\s*)?\*?\s*(\w+)\s*\(`)
	tsOperation = regexp.MustCompile(`@operationId((?:[ \t]+[A-Za-z][A-Za-z0-9]*)+)`)
	tsErrorCls  = regexp.MustCompile(`export class (\w+) extends APIError \{\s*static override readonly code = "(\w+)"`)
)

func pythonOperations(t *testing.T) (ops map[string][]string, classes map[string]string) {
	t.Helper()
	ops, classes = map[string][]string{}, map[string]string{}
	for file, src := range readSources(t, "../sdk/python/airlock", ".py") {
		for _, m := range pyOperation.FindAllStringSubmatch(src, -1) {
			for _, s := range pyString.FindAllStringSubmatch(m[1], -1) {
				ops[s[1]] = append(ops[s[1]], file+":"+m[2])
			}
		}
		for _, m := range pyErrorClass.FindAllStringSubmatch(src, -1) {
			classes[m[2]] = m[1]
		}
	}
	return ops, classes
}

func typescriptOperations(t *testing.T) (ops map[string][]string, classes map[string]string) {
	t.Helper()
	ops, classes = map[string][]string{}, map[string]string{}
	for file, src := range readSources(t, "../sdk/typescript/src", ".ts") {
		for _, m := range tsDoc.FindAllStringSubmatch(src, -1) {
			for _, tag := range tsOperation.FindAllStringSubmatch(m[1], -1) {
				for _, id := range strings.Fields(tag[1]) {
					ops[id] = append(ops[id], file+":"+m[2])
				}
			}
		}
		for _, m := range tsErrorCls.FindAllStringSubmatch(src, -1) {
			classes[m[2]] = m[1]
		}
	}
	return ops, classes
}

// TestClientsCoverEveryOperation: the Go client, the Python SDK and the
// TypeScript SDK each implement every operation of api/openapi.yaml (but the
// reviewers' HTML pages, tagged ui) and name only operations it has; each
// SDK has an error class, named after the code in CamelCase, for every
// problem code of the Problem schema.
func TestClientsCoverEveryOperation(t *testing.T) {
	c := readContract(t)
	t.Run("go", func(t *testing.T) { c.check(t, "the Go client (client/)", goOperations(t)) })
	t.Run("python", func(t *testing.T) {
		ops, classes := pythonOperations(t)
		c.check(t, "the Python SDK (sdk/python)", ops)
		c.checkErrors(t, "the Python SDK (sdk/python)", classes)
	})
	t.Run("typescript", func(t *testing.T) {
		ops, classes := typescriptOperations(t)
		c.check(t, "the TypeScript SDK (sdk/typescript)", ops)
		c.checkErrors(t, "the TypeScript SDK (sdk/typescript)", classes)
	})
}
