package upstream_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// The vectors were computed independently (Python's hmac and hashlib).
func TestHMACSignKnownVectors(t *testing.T) {
	at := time.Unix(1700000000, 0)
	tests := []struct {
		name      string
		spec      upstream.HMACSigning
		key       string
		req       upstream.SignedRequest
		canonical string
		want      string
	}{
		{
			name: "default sha256 hex over method, path, query, timestamp, body hash",
			spec: upstream.HMACSigning{Header: "X-Signature"},
			key:  "CANARY-key",
			req:  upstream.SignedRequest{Method: "post", Path: "/v1/charges", Query: "a=1&b=x%20y", Body: []byte(`{"amount":5}`), Time: at},
			canonical: "POST\n/v1/charges\na=1&b=x%20y\n1700000000\n" +
				"7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf",
			want: "t=1700000000,v1=1d73730b55dde88d51fa89c893f999026004777bf1b2996ad24f037204d4226c",
		},
		{
			name: "sha512 base64, no body, no query",
			spec: upstream.HMACSigning{Header: "X-Sig", Algorithm: "sha512", Encoding: "base64", Format: "{signature}"},
			key:  "k2",
			req:  upstream.SignedRequest{Method: "GET", Path: "/base/items", Time: at},
			canonical: "GET\n/base/items\n\n1700000000\n" +
				"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			want: "/8b5bmF14aydViXwlWk/YCL5xtT7ZSrTDqqW34w4Hg01liKjGjiXyuE6z/WpV5axPOSSDI6BLLq6A4TnMM1QTQ==",
		},
		{
			name:      "custom template with host and literal text",
			spec:      upstream.HMACSigning{Header: "X-Sig", Over: "{method} {host} {path}", Format: "sig={signature}"},
			key:       "k3",
			req:       upstream.SignedRequest{Method: "GET", Host: "api.example.com:8443", Path: "/x", Time: at},
			canonical: "GET api.example.com:8443 /x",
			want:      "sig=b6c89a8cc08ea07dba02481e7d873a2484e2389f9b1828d7454c077e086f916c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if err := spec.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := spec.Canonical(tt.req); got != tt.canonical {
				t.Errorf("Canonical = %q, want %q", got, tt.canonical)
			}
			if got := spec.Sign(upstream.NewSecret(tt.key), tt.req); got != tt.want {
				t.Errorf("Sign = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHMACValidate(t *testing.T) {
	tests := []struct {
		name string
		spec upstream.HMACSigning
		want string // "" = valid
	}{
		{"ok defaults", upstream.HMACSigning{Header: "X-Signature"}, ""},
		{"fail no header", upstream.HMACSigning{}, "header is required"},
		{"fail bad header", upstream.HMACSigning{Header: "X Sig"}, "not a valid header"},
		{"fail algorithm", upstream.HMACSigning{Header: "X", Algorithm: "md5"}, "algorithm"},
		{"fail encoding", upstream.HMACSigning{Header: "X", Encoding: "hexx"}, "encoding"},
		{"fail format without signature", upstream.HMACSigning{Header: "X", Format: "t={timestamp}"}, "{signature}"},
		{"fail format names the secret", upstream.HMACSigning{Header: "X", Format: "{signature}:{secret}"}, "only {signature}"},
		{"fail format line break", upstream.HMACSigning{Header: "X", Format: "{signature}\r\nX-Evil: 1"}, "line break"},
		{"fail unknown placeholder", upstream.HMACSigning{Header: "X", Over: "{method}{path}{secret}"}, "over may name only"},
		{"fail uncovered path", upstream.HMACSigning{Header: "X", Over: "{method}{timestamp}"}, "at least"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// Do signs what it sends: a server recomputing the MAC over the request it
// received (path below the base URL's prefix, the re-encoded query, the
// body) accepts it, and the secret itself never travels.
func TestHMACDoSignsTheRequestSent(t *testing.T) {
	const key = "CANARY-hmac-key"
	type seen struct {
		header string
		ok     bool
		raw    string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Get("X-Signature")
		ts, sig, _ := strings.Cut(strings.TrimPrefix(h, "t="), ",v1=")
		sum := sha256.Sum256(body)
		canon := r.Method + "\n" + r.URL.EscapedPath() + "\n" + r.URL.RawQuery + "\n" + ts + "\n" + hex.EncodeToString(sum[:])
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(canon))
		var raw strings.Builder
		_ = r.Write(&raw)
		got <- seen{header: h, ok: hmac.Equal([]byte(sig), []byte(hex.EncodeToString(m.Sum(nil)))), raw: raw.String() + string(body)}
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/api/")
	spec := &upstream.HMACSigning{Header: "X-Signature"}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	u := &upstream.Upstream{Name: "signed", BaseURL: base, Inject: upstream.Injection{HMAC: spec}}
	u.SetTransport(upstream.NewTransport())
	before := time.Now().Unix()
	resp, err := u.Do(context.Background(), &upstream.Outbound{
		Method: "POST", Path: "/v1/items/a%2Fb", Query: "q=x%20y&z=1", Header: http.Header{}, Body: []byte(`{"n":1}`),
	}, upstream.Credential{Secret: upstream.NewSecret(key)})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := <-got
	if !s.ok {
		t.Fatalf("the server could not verify %q", s.header)
	}
	ts, _ := strconv.ParseInt(strings.TrimPrefix(strings.SplitN(s.header, ",", 2)[0], "t="), 10, 64)
	if ts < before-1 {
		t.Fatalf("timestamp %d is not the signing time", ts)
	}
	if strings.Contains(s.raw, key) {
		t.Fatal("the HMAC key travelled with the request")
	}
}
