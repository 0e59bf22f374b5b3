package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/config"
)

// docPages reads the user's documentation: README.md and every docs/*.md,
// keyed by their path from the repository's root.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	names, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"../../README.md"}, names...) {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pages[strings.TrimPrefix(name, "../../")] = string(data)
	}
	return pages
}

// sortedPages are the pages' paths in order, so that failures read the same
// on every run.
func sortedPages(pages map[string]string) []string {
	var names []string
	for name := range pages {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// codeBlocks are the fenced blocks of a page in the given language.
func codeBlocks(page, lang string) []string {
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^ *```"+regexp.QuoteMeta(lang)+"\n(.*?)^ *```").FindAllStringSubmatch(page, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// docEnv is what ${VAR} expands to when a documented configuration is parsed.
func docEnv(k string) string { return "a-sufficiently-long-value-for-" + strings.ToLower(k) }

// TestDocConfigExamples parses every YAML block of the README and docs/
// pages: each must be YAML; a whole configuration (one naming
// sandbox_listen) must load through the broker's own config loader, and so
// must a fragment made only of top-level configuration keys (`upstreams:`,
// `vault:`, `audit:`...), given the bootstrap admin token it lacks.
func TestDocConfigExamples(t *testing.T) {
	pages := docPages(t)
	full := map[string]bool{}
	for _, name := range sortedPages(pages) {
		for i, b := range codeBlocks(pages[name], "yaml") {
			b = dedent(b)
			var n yaml.Node
			if err := yaml.Unmarshal([]byte(b), &n); err != nil {
				t.Errorf("%s: yaml block %d does not parse: %v\n%s", name, i, err, b)
				continue
			}
			switch {
			case strings.Contains(b, "sandbox_listen:"):
				if _, err := config.Parse([]byte(b), docEnv); err != nil {
					t.Errorf("%s: yaml block %d is not a valid configuration: %v\n%s", name, i, err, b)
				}
				full[name] = true
			case topLevelOnly(&n):
				doc := b
				if !strings.Contains(b, "admin_token") {
					doc = "admin_token: ${AIRLOCK_ADMIN_TOKEN}\n" + b
				}
				if _, err := config.Parse([]byte(doc), docEnv); err != nil {
					t.Errorf("%s: yaml block %d is not a valid configuration fragment: %v\n%s", name, i, err, b)
				}
			}
		}
	}
	for _, name := range []string{"README.md", "docs/configuration.md"} {
		if !full[name] {
			t.Errorf("%s has no whole configuration example", name)
		}
	}
	example, err := os.ReadFile("../../deploy/airlock.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(example, docEnv); err != nil {
		t.Errorf("deploy/airlock.example.yaml: %v", err)
	}
}

// topLevelKeys are the configuration's top-level keys, read from its yaml
// tags.
var topLevelKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeOf(config.Config{})
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}()

// topLevelOnly: the document is a mapping whose keys are all top-level
// configuration keys.
func topLevelOnly(n *yaml.Node) bool {
	if len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode || len(n.Content[0].Content) == 0 {
		return false
	}
	for i := 0; i < len(n.Content[0].Content); i += 2 {
		if !topLevelKeys[n.Content[0].Content[i].Value] {
			return false
		}
	}
	return true
}

// dedent removes the indentation a block has inside a list item.
func dedent(b string) string {
	lines := strings.Split(b, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestDocsSelfContained: the README and docs/ refer to nothing outside the
// repository (design notes, the team's testing notes, issue numbers), and
// every relative link names a file of the repository.
func TestDocsSelfContained(t *testing.T) {
	outside := []*regexp.Regexp{
		regexp.MustCompile(`DESIGN`),
		regexp.MustCompile(`TESTING\.md|STYLE\.md|DEVELOPERS\.md`),
		regexp.MustCompile(`\.\./shared`),
		regexp.MustCompile(`(?i)\bissues? #?\d+`),
		regexp.MustCompile(`(^|[\s(])#\d+\b`),
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	pages := docPages(t)
	for _, name := range sortedPages(pages) {
		page := pages[name]
		for i, line := range strings.Split(page, "\n") {
			for _, re := range outside {
				if re.MatchString(line) {
					t.Errorf("%s:%d refers outside the repository (%s): %s", name, i+1, re, line)
				}
			}
		}
		for _, m := range link.FindAllStringSubmatch(page, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join("../..", filepath.Dir(name), target)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s, which is not in the repository", name, target)
			}
		}
	}
}

// TestReadmeLinksEveryDocPage: a user finds every docs/ page from the
// README.
func TestReadmeLinksEveryDocPage(t *testing.T) {
	pages := docPages(t)
	for _, name := range sortedPages(pages) {
		if name == "README.md" || strings.HasSuffix(name, "-notes.md") { // notes are appended to their page by make perf
			continue
		}
		if !strings.Contains(pages["README.md"], "]("+name+")") {
			t.Errorf("README.md does not link %s", name)
		}
	}
	if n := strings.Count(pages["README.md"], "\n"); n > 300 {
		t.Errorf("README.md has %d lines; the reference belongs in docs/", n)
	}
}

// TestDocConfigErrorsExample: the errors docs/configuration.md shows for its
// faulty file are the loader's, line for line.
func TestDocConfigErrorsExample(t *testing.T) {
	page := docPages(t)["docs/configuration.md"]
	m := regexp.MustCompile("(?s)Errors: .*?```yaml\n(.*?)```.*?```text\n(.*?)```").FindStringSubmatch(page)
	if m == nil {
		t.Fatal("docs/configuration.md has no faulty file and its errors")
	}
	_, err := config.Parse([]byte(m[1]), docEnv)
	if err == nil {
		t.Fatalf("the faulty file loads:\n%s", m[1])
	}
	if got, want := strings.TrimSpace(err.Error()), strings.TrimSpace(m[2]); got != want {
		t.Errorf("the loader reports\n%s\nthe page shows\n%s", got, want)
	}
}

// TestDocCommandsExist: every broker command a code block of the README or
// docs/ runs (`broker …`, `bin/broker …`, `go run ./cmd/broker …`) is one
// the program has, and its flags are ones the command's usage names.
func TestDocCommandsExist(t *testing.T) {
	usage := map[string]string{} // every leaf command of the CLI, by its path, to its flags' usage
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		for _, sub := range c.Commands() {
			name := strings.TrimSpace(path + " " + sub.Name())
			if sub.HasSubCommands() {
				walk(sub, name)
				continue
			}
			usage[name] = sub.Flags().FlagUsages() + sub.InheritedFlags().FlagUsages()
		}
	}
	walk(newRoot(&cliEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}), "")
	// A command position (a line's start after a prompt and variable
	// assignments, or after $( ( ; && |), then the program and its words.
	invocation := regexp.MustCompile(`(?:^|\$\(|\(|;|&&|\|)\s*(?:\$ )?(?:[A-Z_]+=\S*\s+)*(?:go run \./cmd/broker|[\w./$"{}-]*/broker"?|broker)\s+([a-z]+)(?:\s+([a-z-]+))?([^|;)&\n]*)`)
	block := regexp.MustCompile("(?ms)^ *```[a-z]*\n(.*?)^ *```")
	pages := docPages(t)
	seen := 0
	for _, name := range sortedPages(pages) {
		for _, b := range block.FindAllStringSubmatch(pages[name], -1) {
			for _, line := range strings.Split(strings.ReplaceAll(b[1], "\\\n", " "), "\n") {
				if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
					line = line[:i] // a comment
				}
				for _, m := range invocation.FindAllStringSubmatch(line, -1) {
					cmd := m[1]
					if _, ok := usage[cmd]; !ok {
						cmd = m[1] + " " + m[2]
					}
					u, ok := usage[cmd]
					if !ok {
						t.Errorf("%s runs broker %s %s, which the program does not have: %s", name, m[1], m[2], line)
						continue
					}
					seen++
					for _, flag := range regexp.MustCompile(`\s(--[a-z-]+)`).FindAllStringSubmatch(m[3], -1) {
						if !strings.Contains(u, flag[1]) {
							t.Errorf("%s: broker %s has no flag %s: %s", name, cmd, flag[1], line)
						}
					}
				}
			}
		}
	}
	if seen < 20 {
		t.Errorf("found only %d broker commands in the docs", seen)
	}
}
