package upstream

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestURLIsWhereDoSends: the URL reviewers are shown is the one Do calls,
// with the credential (when it rides in the query) as a placeholder.
func TestURLIsWhereDoSends(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.URL.RequestURI() }))
	defer srv.Close()
	tests := []struct {
		name, base, inject, path, query, want string
	}{
		{"base path", "/v2", "", "/repos/a%2Fb/issues", "page=2&q=a%26b", "/v2/repos/a%2Fb/issues?page=2&q=a%26b"},
		{"base with trailing slash", "/v2/", "", "/x", "", "/v2/x"},
		{"no base path", "", "", "/x", "a=1", "/x?a=1"},
		{"query credential", "/v1", "api_key", "/x", "a=1", "/v1/x?a=1&api_key=" + CredentialPlaceholder},
		{"query credential alone", "", "api_key", "/x", "", "/x?api_key=" + CredentialPlaceholder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bu, _ := url.Parse(srv.URL + tt.base)
			u := &Upstream{Name: "api", BaseURL: bu, Inject: Injection{Query: tt.inject, Header: "Authorization", Format: "Bearer {secret}"}, transport: NewTransport()}
			if tt.inject != "" {
				u.Inject.Header = ""
			}
			shown := u.URL(tt.path, tt.query)
			if shown != srv.URL+tt.want {
				t.Fatalf("URL = %s, want %s", shown, srv.URL+tt.want)
			}
			resp, err := u.Do(t.Context(), &Outbound{Method: "GET", Path: tt.path, Query: tt.query, Header: http.Header{}}, Credential{Secret: NewSecret(canary)})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			sent := srv.URL + <-got
			if want := strings.Replace(shown, CredentialPlaceholder, url.QueryEscape(canary), 1); sent != want {
				t.Fatalf("Do sent %s, shown %s", sent, shown)
			}
		})
	}
}
