package main

import (
	"os"
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
