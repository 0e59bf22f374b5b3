package oauth2_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/oauth2"
)

// TestMintFailureCauses: a token request the issuer refuses fails as
// credential_unavailable with a fixed cause naming the status (never the
// issuer's own text), or what else went wrong.
func TestMintFailureCauses(t *testing.T) {
	secret, err := upstream.NewEnvSource("S", func(string) string { return "CANARY-client-secret" })
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		status int
		body   string
		cause  string
	}{
		{"401", http.StatusUnauthorized, `{"error":"invalid_client","error_description":"CANARY-ish text from the issuer"}`, "the issuer answered 401"},
		{"invalid grant", http.StatusBadRequest, `{"error":"invalid_grant"}`, "the issuer answered invalid_grant"},
		{"malformed", http.StatusOK, `not json`, "the issuer's token answer is malformed"},
		{"not bearer", http.StatusOK, `{"access_token":"x","token_type":"mac"}`, "the issuer issued a token that is not a bearer token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			tu, _ := url.Parse(srv.URL + "/token")
			m := &oauth2.ClientCredentials{TokenURL: tu, ClientID: "c", ClientSecret: secret, Client: &http.Client{Timeout: 5 * time.Second}}
			_, err := m.Mint(context.Background(), upstream.Scope{Now: time.Now(), Expires: time.Now().Add(time.Hour)})
			if !errors.Is(err, upstream.ErrCredentialUnavailable) || fault.CauseOf(err) != tt.cause {
				t.Fatalf("Mint = %v (cause %q), want credential_unavailable because %q", err, fault.CauseOf(err), tt.cause)
			}
		})
	}
}
