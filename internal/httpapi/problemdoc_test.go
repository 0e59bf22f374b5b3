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

// Kinds that share a code keep their own title, which is a private error's
// detail: a signature is not just "Invalid token".
func TestProblemTitlesOfKinds(t *testing.T) {
	for _, tt := range []struct {
		err                 error
		status              int
		code, title, detail string
	}{
		{errAWSSignature, 403, "invalid_token", "Invalid signature", "Invalid signature"},
		{errMethod, 405, "bad_request", "Method not allowed", "Method not allowed"},
		{errBodyTooLarge, 413, "bad_request", "Request body too large", errBodyTooLarge.Error()},
		{errProxyAuth, 401, "invalid_token", "Proxy authentication required", errProxyAuth.Error()},
		{errMissingToken, 401, "invalid_token", "Invalid token", errMissingToken.Error()},
	} {
		p := problemFor(tt.err)
		if p.Status != tt.status || p.Code != tt.code || p.Title != tt.title || p.Detail != tt.detail {
			t.Errorf("%v: %d %s %q %q, want %d %s %q %q", tt.err, p.Status, p.Code, p.Title, p.Detail, tt.status, tt.code, tt.title, tt.detail)
		}
	}
}
