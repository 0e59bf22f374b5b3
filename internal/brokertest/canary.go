package brokertest

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"testing"
)

// Canary is the upstream credential planted in every e2e test; it must
// never reach anything the sandbox side, the audit log or the logs see.
const Canary = "CANARY-e2e-0f1e2d3c/+=secret"

// CanaryForms are the encodings of the canary that must not leak.
func CanaryForms() []string {
	out := []string{Canary, url.QueryEscape(Canary), url.PathEscape(Canary)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(Canary)))
	}
	return out
}

// AssertNoCanary fails the test if data (what names it) holds the canary
// in any of its forms.
func AssertNoCanary(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, f := range CanaryForms() {
		if bytes.Contains(data, []byte(f)) {
			t.Fatalf("%s contains the canary secret (form %q)", what, f)
		}
	}
}
