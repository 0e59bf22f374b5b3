package brokertest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Recorded is what the upstream received.
type Recorded struct {
	At       time.Time
	Method   string
	RawPath  string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// Upstream is a real HTTP upstream on loopback that records every request
// and answers by path: /slow waits (30 s or until the client goes) after
// announcing itself on Started, /big streams the credential and its base64
// across writes, /brotli answers an encoding the broker cannot read,
// /redirect points off loopback with the credential; anything else echoes
// the request (method, path, query, Authorization and its encodings, body)
// as JSON, with a Set-Cookie.
type Upstream struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []Recorded
	Started chan struct{} // a /slow request arrived
}

// NewUpstream starts an Upstream, closed at the test's end.
func NewUpstream(t *testing.T) *Upstream {
	u := &Upstream{Started: make(chan struct{}, 16)}
	u.Server = httptest.NewServer(u)
	t.Cleanup(u.Close)
	return u
}

// Record adds a request to those Requests returns (for a handler of a
// test's own in front of ServeHTTP).
func (u *Upstream) Record(rec Recorded) {
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	u.mu.Unlock()
}

// ServeHTTP records r and answers it by path (see Upstream). A test that
// needs another server (TLS, a certificate of its own) builds an Upstream
// with Started made, and its Server with this handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.Record(Recorded{At: time.Now(), Method: r.Method, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	auth := r.Header.Get("Authorization")
	secret := strings.TrimPrefix(auth, "Bearer ")
	switch {
	case strings.HasSuffix(r.URL.Path, "/slow"):
		u.Started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case strings.HasSuffix(r.URL.Path, "/big"):
		w.Header().Set("Content-Type", "text/plain")
		fl := w.(http.Flusher)
		for i := 0; i < 2000; i++ {
			// The secret and its encodings land across write boundaries.
			fmt.Fprintf(w, "line %05d %s %s|", i, secret, base64.StdEncoding.EncodeToString([]byte("user:"+secret)))
			if i%97 == 0 {
				fl.Flush()
			}
		}
		return
	case strings.HasSuffix(r.URL.Path, "/brotli"):
		// An encoding the broker cannot read, so cannot scrub.
		w.Header().Set("Content-Encoding", "br")
		_, _ = w.Write([]byte("\x1b\x03" + secret))
		return
	case strings.HasSuffix(r.URL.Path, "/redirect"):
		w.Header().Set("Location", "http://198.51.100.7/steal?k="+url.QueryEscape(secret))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("Set-Cookie", "session=upstream-cookie")
	w.Header().Set("X-Echo-Auth", auth)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"method": r.Method, "path": r.URL.EscapedPath(), "query": r.URL.RawQuery,
		"auth": auth, "auth_b64": base64.StdEncoding.EncodeToString([]byte(auth)),
		"auth_url": url.QueryEscape(secret), "body": string(body),
	})
}

// Requests is every request received so far, in order.
func (u *Upstream) Requests() []Recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Recorded(nil), u.reqs...)
}

// Last is the last request received; none fails the test.
func (u *Upstream) Last(t *testing.T) Recorded {
	t.Helper()
	rs := u.Requests()
	if len(rs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return rs[len(rs)-1]
}
