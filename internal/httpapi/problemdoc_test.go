package httpapi

import (
	"os"
	"regexp"
	"testing"
)

// TestProblemDocListsEveryCode: docs/problems.md has a row for every
// problem code the broker answers with, and no row for one it does not.
func TestProblemDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		rows[string(m[1])] = true
	}
	for code := range titles {
		if !rows[code] {
			t.Errorf("docs/problems.md has no row for %s", code)
		}
	}
	for code := range rows {
		if _, ok := titles[code]; !ok {
			t.Errorf("docs/problems.md lists %s, which the broker never answers", code)
		}
	}
}
