package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runOffline runs `broker args...` in-process with an empty environment
// (no AIRLOCK_TOKEN, no AIRLOCK_ADDR): what a command does before it needs
// a server.
func runOffline(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

// commandTree is every command a user can type (cobra's help and
// completion included, its hidden ones not), as the words after `broker`.
func commandTree() [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(slices.Clone(path), sub.Name()))
			}
		}
	}
	walk(newRoot(&cliEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}), nil)
	return out
}

func findCommand(t *testing.T, path []string) *cobra.Command {
	t.Helper()
	root := newRoot(&cliEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	c, rest, err := root.Find(path)
	if err != nil || len(rest) > 0 {
		t.Fatalf("broker %s: %v %v", strings.Join(path, " "), rest, err)
	}
	return c
}

// TestCLIHelpEveryCommand: --help on every command of the tree (a new one
// is covered without touching this test) succeeds without a token or a
// server, prints the usage, every flag and every subcommand, to stdout.
func TestCLIHelpEveryCommand(t *testing.T) {
	tree := commandTree()
	if len(tree) < 30 {
		t.Fatalf("the command tree has only %d commands", len(tree))
	}
	for _, path := range tree {
		name := strings.TrimSpace("broker " + strings.Join(path, " "))
		t.Run(name, func(t *testing.T) {
			c := findCommand(t, path)
			stdout, stderr, err := runOffline(append(slices.Clone(path), "--help")...)
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", name, err, stderr)
			}
			if !strings.Contains(stdout, "Usage:\n  "+name) || !strings.Contains(stdout, "Flags:\n") {
				t.Fatalf("%s --help is not a usage:\n%s", name, stdout)
			}
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(stdout, "--"+f.Name) {
					t.Errorf("%s --help does not list --%s", name, f.Name)
				}
			})
			for _, sub := range c.Commands() {
				if !sub.Hidden && !strings.Contains(stdout, "  "+sub.Name()+" ") {
					t.Errorf("%s --help does not list %s", name, sub.Name())
				}
			}
			if !c.HasSubCommands() && c.Example == "" && c.Parent().Name() != "completion" && c.Name() != "help" {
				t.Errorf("%s has no example", name)
			}
		})
	}
}

// TestCLIUsageErrors: an unknown command or flag, or a missing argument,
// is a usage error (exit 2) with the command's usage on stderr and a
// suggestion for a near miss; the real binary exits 2.
func TestCLIUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"unknown-command", []string{"sesion"}, `did you mean session`},
		{"unknown-subcommand", []string{"session", "lst"}, `did you mean list`},
		{"unknown-flag", []string{"session", "list", "--bogus"}, "unknown flag: --bogus"},
		{"unknown-flag-before-command", []string{"--bogus", "session"}, "unknown flag: --bogus"},
		{"missing-id", []string{"session", "get"}, "accepts 1 arg(s), received 0"},
		{"extra-argument", []string{"tokens", "list", "x"}, `unknown command "x"`},
		{"group-alone", []string{"approvals"}, "broker approvals needs a command"},
		{"no-command", nil, "broker needs a command"},
		{"bad-output", []string{"tokens", "list", "-o", "yaml"}, "--output must be table or json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runOffline(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if exitCode(err) != 2 {
				t.Errorf("exit code %d, want 2 (%v)", exitCode(err), err)
			}
			if !strings.Contains(stderr, "Usage:") || stdout != "" {
				t.Errorf("stdout %q, stderr without the usage: %q", stdout, stderr)
			}
		})
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "session", "list", "--bogus")
	cmd.Env = []string{"AIRLOCK_TEST_CLI=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "broker: unknown flag: --bogus") {
		t.Fatalf("the binary: %v\n%s", err, stderr.String())
	}
	cmd = exec.Command(self, "session", "create", "--help")
	cmd.Env = []string{"AIRLOCK_TEST_CLI=1"}
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "--trusted-input") {
		t.Fatalf("the binary's session create --help: %v\n%s", err, out)
	}
}

// TestCLIVersion: `broker version` and `broker --version` print the same
// build information.
func TestCLIVersion(t *testing.T) {
	v, _, err := runOffline("version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"broker ", "module   github.com/airlock-broker/airlock", "revision ", "go       go1."} {
		if !strings.Contains(v, want) {
			t.Errorf("version does not say %q:\n%s", want, v)
		}
	}
	flag, _, err := runOffline("--version")
	if err != nil || flag != v {
		t.Fatalf("--version %q (%v), want %q", flag, err, v)
	}
}

// TestCLICompletion: cobra's completion scripts, for each shell.
func TestCLICompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_broker", "zsh": "#compdef broker", "fish": "complete -c broker"} {
		out, _, err := runOffline("completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v, %d bytes without %q", shell, err, len(out), want)
		}
	}
}

// TestCLIDocCoversEveryCommand: docs/cli.md has a section "### broker
// PATH" with an example for every command of the tree, and none for a
// command that does not exist. A failure prints the missing sections.
func TestCLIDocCoversEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^### `+"`"+`?(broker[a-z -]*?)`+"`"+`?$`).FindAllSubmatchIndex(doc, -1)
	for i, m := range parts {
		end := len(doc)
		if i+1 < len(parts) {
			end = parts[i+1][0]
		}
		sections[string(doc[m[2]:m[3]])] = string(doc[m[1]:end])
	}
	inTree := map[string]bool{}
	var missing strings.Builder
	for _, path := range commandTree() {
		c := findCommand(t, path)
		if len(path) == 0 || c.HasSubCommands() {
			continue // groups: their commands are the sections
		}
		name := "broker " + strings.Join(path, " ")
		inTree[name] = true
		body, ok := sections[name]
		if !ok {
			missing.WriteString("### " + name + "\n\n" + c.Short + ".\n\n```\n" + strings.TrimSpace(c.Example) + "\n```\n\n")
			continue
		}
		if !strings.Contains(body, "```") || !strings.Contains(body, name) {
			t.Errorf("docs/cli.md: %s has no example that runs it", name)
		}
	}
	if missing.Len() > 0 {
		t.Errorf("docs/cli.md misses these commands; add:\n\n%s", missing.String())
	}
	for name := range sections {
		if !inTree[name] {
			t.Errorf("docs/cli.md documents %s, which the broker does not have", name)
		}
	}
}

// TestCLIInvocationsInDocs: every `broker ...` command line in the README
// and docs/*.md names a command the broker has, with flags it has (the
// README's `broker grant add … | get ID | revoke ID` shorthand included).
func TestCLIInvocationsInDocs(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	inline := regexp.MustCompile("`(broker [^`]+)`")
	fence := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	start := regexp.MustCompile(`(?:^\s*(?:\$ )?|\$\(|<\(|&& |\| )broker `)
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, m := range fence.FindAllSubmatch(data, -1) {
			lines = append(lines, strings.Split(string(m[1]), "\n")...)
		}
		for _, m := range inline.FindAllSubmatch(data, -1) {
			lines = append(lines, strings.ReplaceAll(string(m[1]), "\n", " "))
		}
		for _, line := range lines {
			for _, loc := range start.FindAllStringIndex(line, -1) {
				rest := line[loc[1]:]
				if cut := strings.IndexAny(rest, ")#;<>&"); cut >= 0 {
					rest = rest[:cut]
				}
				if checkInvocation(t, f, strings.Split(rest, " | ")) {
					checked++
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d broker command lines", checked)
	}
}

// checkInvocation checks `broker ALTERNATIVES[0]`, and each further
// alternative that names a sibling subcommand (`… | get ID`); it reports
// whether the line named a command at all.
func checkInvocation(t *testing.T, file string, alternatives []string) bool {
	t.Helper()
	words := strings.Fields(alternatives[0])
	root := newRoot(&cliEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	root.SuggestionsMinimumDistance = 2
	if len(words) == 0 || strings.HasPrefix(words[0], "-") {
		return false // "broker --version": the root's flags are cobra's
	}
	if c, _, _ := root.Find(words[:1]); c == root && len(root.SuggestionsFor(words[0])) == 0 {
		return false // prose in a diagram ("broker replica × N"), not a command or a near miss
	}
	check := func(base *cobra.Command, words []string) *cobra.Command {
		c, args, err := base.Find(words)
		positional := slices.ContainsFunc(args, func(a string) bool { return !strings.HasPrefix(a, "-") })
		if err != nil || c == base || c.HasSubCommands() && positional {
			t.Errorf("%s: broker %s: no such command", file, strings.Join(words, " "))
			return nil
		}
		for _, w := range args {
			w = strings.Trim(w, "[]")
			if name, ok := strings.CutPrefix(w, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				if name != "help" && c.Flags().Lookup(name) == nil && c.InheritedFlags().Lookup(name) == nil {
					t.Errorf("%s: %s has no flag --%s", file, c.CommandPath(), name)
				}
			}
		}
		return c
	}
	c := check(root, words)
	if c == nil {
		return true
	}
	for _, alt := range alternatives[1:] {
		w := strings.Fields(alt)
		if len(w) == 0 || c.Parent() == nil {
			break
		}
		if sib, _, err := c.Parent().Find(w[:1]); err != nil || sib == c.Parent() {
			break // a shell pipe, not an alternative
		}
		check(c.Parent(), w)
	}
	return true
}

// The single-dash long flags of the CLI's earlier syntax (Go's flag
// package) still work: scripts written for it keep running; a flag's
// value is never rewritten, whatever it looks like.
func TestCLIGoFlagSyntax(t *testing.T) {
	root := newRoot(&cliEnv{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	for _, tt := range []struct{ in, want []string }{
		{[]string{"serve", "-config", "x.yaml"}, []string{"serve", "--config", "x.yaml"}},
		{[]string{"dev", "-data-dir=/tmp/d"}, []string{"dev", "--data-dir=/tmp/d"}},
		{[]string{"approvals", "deny", "act_1", "--comment", "-rf"}, []string{"approvals", "deny", "act_1", "--comment", "-rf"}},
		{[]string{"approvals", "deny", "act_1", "-comment", "-rf"}, []string{"approvals", "deny", "act_1", "--comment", "-rf"}},
		{[]string{"killswitch", "engage", "--reason", "-incident"}, []string{"killswitch", "engage", "--reason", "-incident"}},
		{[]string{"session", "list", "-o", "-json"}, []string{"session", "list", "-o", "-json"}},
		{[]string{"session", "list", "-ojson"}, []string{"session", "list", "-ojson"}},
		{[]string{"session", "create", "--", "-task-id"}, []string{"session", "create", "--", "-task-id"}},
		{[]string{"audit", "export", "-nope"}, []string{"audit", "export", "-nope"}},
	} {
		if got := goFlags(root, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("goFlags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", "-help"}, func(string) string { return "" }, nil, &out, &out); err != nil {
		t.Fatalf("-help: %v\n%s", err, out.String())
	}
}
