package httpapi

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
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

// TestProblemCodesOneSet: the codes the error kinds answer
// (internal/fault), the problem table's titles and the spec's Problem enum
// are one set: a client generated from the spec knows every code.
func TestProblemCodesOneSet(t *testing.T) {
	spec, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)Stable machine code.*?enum: \[([^\]]*)\]`).FindSubmatch(spec)
	if m == nil {
		t.Fatal("the spec's Problem code has no enum")
	}
	inSpec := map[string]bool{}
	for _, c := range strings.Split(string(m[1]), ",") {
		inSpec[strings.TrimSpace(c)] = true
	}
	kinds := map[string]bool{}
	for k := fault.Internal; ; k++ {
		if k > fault.Internal && k.Code() == fault.Internal.Code() {
			break // past the last kind: Code answers internal
		}
		kinds[k.Code()] = true
	}
	for name, set := range map[string]map[string]bool{"the spec's enum": inSpec, "the kinds": kinds} {
		for code := range set {
			if _, ok := titles[code]; !ok {
				t.Errorf("%s has %s, which the problem table has no title for", name, code)
			}
		}
		for code := range titles {
			if !set[code] {
				t.Errorf("%s lacks %s", name, code)
			}
		}
	}
}
