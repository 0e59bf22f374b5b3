package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCLICommandsInReadme: every row of the client's command table is in
// the README's CLI section, and every command there is in the table.
func TestCLICommandsInReadme(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## CLI\n.*?```\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("the README has no CLI section with a code block")
	}
	// "broker grant add SESSION_ID --grant '{…}' | get ID | revoke ID" lists
	// grant add, grant get and grant revoke: a subcommand opens each part.
	inReadme := map[string]bool{}
	for _, line := range strings.Split(string(m[1]), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "broker" {
			continue
		}
		group := fields[1]
		for _, part := range strings.Split(strings.Join(fields[2:], " "), " | ") {
			if sub := strings.Fields(part); len(sub) > 0 {
				inReadme[group+" "+sub[0]] = true
			}
		}
	}
	inTable := map[string]bool{}
	for _, cmd := range clientCommands {
		if inTable[cmd.name] {
			t.Errorf("%q is in the table twice", cmd.name)
		}
		inTable[cmd.name] = true
		if !inReadme[cmd.name] {
			t.Errorf("broker %s (%s) is not in the README's CLI section", cmd.name, cmd.usage)
		}
	}
	for name := range inReadme {
		if !inTable[name] {
			t.Errorf("the README lists broker %s, which the client does not have", name)
		}
	}
}
