package githubapp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/githubapp"
)

// TestMintFailureCauses: a token request GitHub refuses, or cannot be
// reached for, fails as credential_unavailable with a fixed cause.
func TestMintFailureCauses(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
	}))
	t.Cleanup(refusing.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, tt := range []struct{ name, api, cause string }{
		{"github answers 401", refusing.URL, "the issuer answered 401"},
		{"connection refused", closed, "connection refused by the issuer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api, _ := url.Parse(tt.api)
			m := &githubapp.App{AppID: "1", InstallationID: "2", Key: key, APIURL: api, Client: &http.Client{Timeout: 5 * time.Second}}
			_, err := m.Mint(context.Background(), upstream.Scope{Now: time.Now(), Expires: time.Now().Add(time.Hour)})
			if !errors.Is(err, upstream.ErrCredentialUnavailable) || fault.CauseOf(err) != tt.cause {
				t.Fatalf("Mint = %v (cause %q), want credential_unavailable because %q", err, fault.CauseOf(err), tt.cause)
			}
		})
	}
}
