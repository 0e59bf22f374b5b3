package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/config"
)

// TestReadmeConfigExamples parses every YAML block of the README, and the
// full configuration reference through the broker's own config loader.
func TestReadmeConfigExamples(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d yaml blocks", len(blocks))
	}
	env := func(k string) string { return "a-sufficiently-long-value-for-" + strings.ToLower(k) }
	parsedFull := false
	for i, b := range blocks {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(b[1]), &n); err != nil {
			t.Errorf("README yaml block %d does not parse: %v\n%s", i, err, b[1])
			continue
		}
		if strings.Contains(b[1], "sandbox_listen:") {
			if _, err := config.Parse([]byte(b[1]), env); err != nil {
				t.Errorf("the README's configuration reference is not a valid config: %v", err)
			}
			parsedFull = true
		}
	}
	if !parsedFull {
		t.Error("the README has no full configuration example")
	}
	example, err := os.ReadFile("../../deploy/airlock.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(example, env); err != nil {
		t.Errorf("deploy/airlock.example.yaml: %v", err)
	}
}

// TestSecurityDocNamesRealTests: every test, benchmark or fuzz target
// docs/security.md names as a guarantee's proof is defined in the
// repository's tests.
func TestSecurityDocNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range def.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)`").FindAllSubmatch(doc, -1)
	if len(named) < 50 {
		t.Fatalf("docs/security.md names only %d tests", len(named))
	}
	for _, m := range named {
		if !defined[string(m[1])] {
			t.Errorf("docs/security.md names %s, which no test file defines", m[1])
		}
	}
}
