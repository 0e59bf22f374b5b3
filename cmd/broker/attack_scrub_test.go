package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Class 4 of issue 11: scrubbing in every form an upstream really writes.
// A hostile sandbox asks an upstream to echo the credential back in some
// encoding, compressed, in a header name, cut off mid-secret, or after a
// rotation; the sandbox must receive none of it.

// scrubForms are the encodings of secret that upstreams really write.
func scrubForms(secret string) []string {
	lowerEscapes := func(s string) string {
		b := []byte(s)
		for i := 0; i+2 < len(b); i++ {
			if b[i] == '%' {
				copy(b[i+1:i+3], strings.ToLower(string(b[i+1:i+3])))
			}
		}
		return string(b)
	}
	jsURI := func(s string) string { // encodeURIComponent
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	jsonEsc := func(s string, escapeHTML bool) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(escapeHTML)
		_ = enc.Encode(s)
		out := strings.TrimSpace(b.String())
		return out[1 : len(out)-1]
	}
	jsonAll := func(s string, digits string) string {
		var b strings.Builder
		for _, u := range utf16.Encode([]rune(s)) {
			b.WriteString(`\u` + string(digits[u>>12&15]) + string(digits[u>>8&15]) + string(digits[u>>4&15]) + string(digits[u&15]))
		}
		return b.String()
	}
	u16 := func(s string, be bool) string {
		var b []byte
		for _, u := range utf16.Encode([]rune(s)) {
			if be {
				b = append(b, byte(u>>8), byte(u))
			} else {
				b = append(b, byte(u), byte(u>>8))
			}
		}
		return string(b)
	}
	out := []string{
		secret,
		url.QueryEscape(secret), url.PathEscape(secret), lowerEscapes(url.QueryEscape(secret)), lowerEscapes(url.PathEscape(secret)), jsURI(secret),
		jsonEsc(secret, true), jsonEsc(secret, false), strings.ReplaceAll(jsonEsc(secret, false), "/", `\/`),
		jsonAll(secret, "0123456789abcdef"), jsonAll(secret, "0123456789ABCDEF"),
		html.EscapeString(secret), template.HTMLEscapeString(secret),
		hex.EncodeToString([]byte(secret)), strings.ToUpper(hex.EncodeToString([]byte(secret))),
		u16(secret, false), u16(secret, true),
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(secret)))
	}
	return out
}

// scrubEmbedded are base64 values holding secret after a prefix (each byte
// alignment) and before a suffix, as "Basic base64(user:secret)" does.
func scrubEmbedded(secret string) []string {
	var out []string
	for _, p := range []string{"", "u", "us", "user:"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			out = append(out, enc.EncodeToString([]byte(p+secret+"-tail")))
		}
	}
	return out
}

// scrubCore is the part of an embedded encoding made only of the secret's
// bits: none of it may reach the sandbox.
func scrubCore(secret, embedded string) string {
	for _, p := range []string{"", "u", "us", "user:"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			if enc.EncodeToString([]byte(p+secret+"-tail")) == embedded {
				k, n := len(p), len(p)+len(secret)
				return embedded[(8*k+5)/6 : 8*n/6]
			}
		}
	}
	panic("not an embedded form")
}

// scrubAssertClean fails when data carries secret in any form.
func scrubAssertClean(t *testing.T, what string, data []byte, secret string) {
	t.Helper()
	for _, f := range scrubForms(secret) {
		if bytes.Contains(data, []byte(f)) {
			t.Fatalf("%s carries the secret as %q", what, f)
		}
	}
	for _, e := range scrubEmbedded(secret) {
		if c := scrubCore(secret, e); bytes.Contains(data, []byte(c)) {
			t.Fatalf("%s carries the secret inside base64 %q", what, c)
		}
	}
}

// scrubAssertHeadersClean checks header values as bytes and header names
// without regard to case.
func scrubAssertHeadersClean(t *testing.T, what string, h http.Header, secret string) {
	t.Helper()
	for k, vs := range h {
		for _, f := range scrubForms(secret) {
			if strings.Contains(strings.ToLower(k), strings.ToLower(f)) {
				t.Fatalf("%s: header name %q carries the secret", what, k)
			}
		}
		for _, v := range vs {
			scrubAssertClean(t, what+" header "+k, []byte(v), secret)
		}
	}
}

// scrubUpstream is a real loopback upstream that echoes every credential
// it has been sent, in every form, in the ways an answer can carry them.
type scrubUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // secrets received, in order
}

func newScrubUpstream(t *testing.T) *scrubUpstream {
	u := &scrubUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *scrubUpstream) secrets() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// body is every form of every secret, one per line.
func (u *scrubUpstream) body(secrets []string) string {
	var b strings.Builder
	for _, s := range secrets {
		for _, v := range []string{s, "Bearer " + s} {
			for i, f := range append(scrubForms(v), scrubEmbedded(v)...) {
				fmt.Fprintf(&b, "form %d: %s;\n", i, f)
			}
		}
	}
	return b.String()
}

func (u *scrubUpstream) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	secret := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	u.mu.Lock()
	if secret != "" && (len(u.seen) == 0 || u.seen[len(u.seen)-1] != secret) {
		u.seen = append(u.seen, secret)
	}
	u.mu.Unlock()
	path := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	body := u.body([]string{secret})
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	switch path {
	case "forms", "payments":
		// In header names (as Go canonicalizes them) and in header values.
		for i, f := range []string{hex.EncodeToString([]byte(secret)), strings.ToUpper(hex.EncodeToString([]byte(secret))),
			base64.RawURLEncoding.EncodeToString([]byte(secret)), url.QueryEscape(secret)} {
			h.Set(fmt.Sprintf("X-Echo-%d-%s", i, f), "1")
		}
		for i, f := range append(scrubForms(secret)[:15], scrubEmbedded(secret)...) {
			h.Set(fmt.Sprintf("X-Form-%d", i), "v "+f)
		}
		_, _ = io.WriteString(w, body)
	case "gzip", "deflate":
		h.Set("Content-Encoding", path)
		var zw io.WriteCloser
		if path == "gzip" {
			zw = gzip.NewWriter(w)
		} else {
			zw, _ = flate.NewWriter(w, 5)
		}
		_, _ = io.WriteString(zw, body)
		_ = zw.Close()
	case "big":
		// Over the small-answer size, unknown length, flushed at odd places so
		// that forms straddle every boundary.
		var all strings.Builder
		for all.Len() < 600<<10 {
			all.WriteString(strings.Repeat("filler ", 37))
			all.WriteString(body)
		}
		data, fl := all.String(), w.(http.Flusher)
		for i, step := 0, 1; i < len(data); i, step = i+step, step*7%4093+1 {
			_, _ = io.WriteString(w, data[i:min(len(data), i+step)])
			fl.Flush()
		}
	case "seen":
		_, _ = io.WriteString(w, u.body(u.secrets()))
	default:
		if enc, ok := scrubCodings[path]; ok {
			// The body is gzip (twice for two codings) whatever the header says.
			h["Content-Encoding"] = enc
			data := []byte(body)
			for range 1 + strings.Count(strings.Join(enc, ","), "gzip") {
				data = scrubGzip(data)
			}
			_, _ = w.Write(data)
			return
		}
		u.serveRaw(w, path, secret)
	}
}

// scrubCodings are the Content-Encoding headers (one line per value) that
// the broker must refuse.
var scrubCodings = map[string][]string{
	"two-lines-identity-gzip": {"identity", "gzip"},
	"two-lines-gzip-gzip":     {"gzip", "gzip"},
	"two-lines-gzip-br":       {"gzip", "br"},
	"list-gzip-gzip":          {"gzip, gzip"},
	"list-identity-gzip":      {"identity, gzip"},
	"list-gzip-br":            {"gzip, br"},
	"br":                      {"br"},
	"zstd":                    {"zstd"},
	"compress":                {"compress"},
}

func scrubGzip(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

// serveRaw answers by hand on the hijacked connection: answers cut off
// mid-secret, and transfer codings net/http would not write.
func (u *scrubUpstream) serveRaw(w http.ResponseWriter, path, secret string) {
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	lead := strings.Repeat("clean text ", 400) + "then: "
	half := secret[:len(secret)/2]
	switch path {
	case "reset-chunked": // streamed: half the secret, then the connection drops
		data := lead + half
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(data), data)
	case "reset-length": // small: fewer bytes than announced
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\nContent-Length: 9000\r\n\r\n%s%s", lead, half)
	case "reset-gzip": // compressed, decodable up to half the secret, then dropped
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = io.WriteString(zw, lead+half)
		_ = zw.Flush()
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", z.Len(), z.Bytes())
	case "te-gzip": // a transfer coding the broker does not decode
		z := scrubGzip([]byte(secret))
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(z), z)
	default:
		fmt.Fprint(rw, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	}
	_ = rw.Flush()
}

// scrubGet sends GET path with token on a fresh connection and reads the
// answer as the sandbox gets it: the raw bytes that arrived, and whether
// the body ended cleanly.
func scrubGet(t *testing.T, b *brokertest.Proc, path, token string) (raw []byte, resp *http.Response, body []byte, bodyErr error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.Sandbox, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: sandbox\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", path, token)
	raw, _ = io.ReadAll(conn)
	resp, err = http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("GET %s: no HTTP answer: %v (%q)", path, err, raw)
	}
	body, bodyErr = io.ReadAll(resp.Body)
	return raw, resp, body, bodyErr
}

// scrubSession may GET any one-segment path of the api upstream.
func scrubSession(b *brokertest.Proc) brokertest.Created {
	return b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/{what}"})))
}

func TestScrubAttackEveryForm(t *testing.T) {
	up := newScrubUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := scrubSession(b)
	for _, path := range []string{"forms", "gzip", "deflate", "big"} {
		t.Run(path, func(t *testing.T) {
			r := b.Do("GET", b.Sandbox+"/v1/proxy/api/"+path, s.Token, nil)
			if r.Status != 200 || !bytes.Contains(r.Body, []byte("form 0: [REDACTED];")) {
				t.Fatalf("%d %.300s", r.Status, r.Body)
			}
			for _, secret := range []string{brokertest.Canary, "Bearer " + brokertest.Canary} {
				scrubAssertClean(t, path+" body", r.Body, secret)
				scrubAssertHeadersClean(t, path, r.Header, secret)
			}
			if ce := r.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("decoded answer still says Content-Encoding %q", ce)
			}
			if path == "forms" {
				for k := range r.Header {
					if strings.HasPrefix(k, "X-Echo-") {
						t.Errorf("a header whose name carried the secret reached the sandbox: %s", k)
					}
				}
				if r.Header.Get("X-Form-0") != "v [REDACTED]" {
					t.Errorf("header value not scrubbed: %q", r.Header.Get("X-Form-0"))
				}
			}
		})
	}
	brokertest.AssertNoCanary(t, "audit export", b.AuditExport())
}

// An answer in a coding the broker cannot fully decode, so cannot scrub, is
// refused: several codings in one header line or several, or unknown ones.
func TestScrubAttackContentEncodings(t *testing.T) {
	up := newScrubUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := scrubSession(b)
	for path := range scrubCodings {
		t.Run(path, func(t *testing.T) {
			r := b.Do("GET", b.Sandbox+"/v1/proxy/api/"+path, s.Token, nil)
			r.WantProblem(t, 502, "upstream_error")
			scrubAssertClean(t, "refused answer", r.Body, brokertest.Canary)
		})
	}
	// A transfer coding other than chunked is not read either.
	b.Do("GET", b.Sandbox+"/v1/proxy/api/te-gzip", s.Token, nil).WantProblem(t, 502, "upstream_error")
}

// An upstream that sends half the secret and then drops the connection: the
// held-back bytes are never sent, and a streamed answer is cut off, not
// ended as if complete.
func TestScrubAttackResetMidSecret(t *testing.T) {
	up := newScrubUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := scrubSession(b)
	half := brokertest.Canary[:len(brokertest.Canary)/2]
	for _, path := range []string{"reset-chunked", "reset-gzip", "reset-length"} {
		t.Run(path, func(t *testing.T) {
			raw, resp, body, bodyErr := scrubGet(t, b, "/v1/proxy/api/"+path, s.Token)
			if bytes.Contains(raw, []byte(half[:8])) {
				t.Fatalf("the beginning of the secret reached the sandbox: %q", raw[max(0, len(raw)-80):])
			}
			if path == "reset-length" {
				if resp.StatusCode != 502 || !bytes.Contains(body, []byte(`"upstream_error"`)) {
					t.Fatalf("small cut-off answer: %d %s", resp.StatusCode, body)
				}
				// The refusal carries none of the upstream's headers, and the audit
				// records what the sandbox got, not the upstream's status.
				if resp.Header.Get("ETag") != "" || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("the 502 carries the upstream's headers: %v", resp.Header)
				}
				brokertest.Eventually(t, 10*time.Second, func() bool {
					for _, rec := range brokertest.ParseAudit(t, b.AuditExport()) {
						if rec.Type == "call.completed" && rec.Path == "/reset-length" {
							return rec.Status == 502 && rec.Code == "upstream_error"
						}
					}
					return false
				})
				return
			}
			if resp.StatusCode != 200 || bodyErr == nil {
				t.Fatalf("a cut-off stream ended cleanly (%d, %d bytes, %v)", resp.StatusCode, len(body), bodyErr)
			}
		})
	}
}

// After a rotation the replaced credential is still scrubbed (grace), and
// the new one too.
func TestScrubAttackRotationGrace(t *testing.T) {
	up := newScrubUpstream(t)
	dir := t.TempDir()
	cred := filepath.Join(dir, "token")
	oldSecret, newSecret := brokertest.Canary+"-old", brokertest.Canary+"-rotated-new"
	if err := os.WriteFile(cred, []byte(oldSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: `  - name: rot
    base_url: ` + up.URL + `
    credential: {source: file, path: ` + cred + `}
    scrub: {rotation_grace: 1h}
`})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "rot", "rules": []any{map[string]any{"method": "GET", "path": "/seen"}}}))
	r := b.Do("GET", b.Sandbox+"/v1/proxy/rot/seen", s.Token, nil)
	if r.Status != 200 || !bytes.Contains(r.Body, []byte("[REDACTED]")) {
		t.Fatalf("%d %.200s", r.Status, r.Body)
	}
	scrubAssertClean(t, "before rotation", r.Body, oldSecret)

	if err := os.WriteFile(cred, []byte(newSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.Do("GET", b.Sandbox+"/v1/proxy/rot/seen", s.Token, nil)
	if got := up.secrets(); r.Status != 200 || len(got) != 2 || got[1] != newSecret {
		t.Fatalf("rotation did not reach the upstream: %d, %d secrets", r.Status, len(got))
	}
	// The upstream echoes the replaced secret too.
	scrubAssertClean(t, "after rotation (old secret)", r.Body, oldSecret)
	scrubAssertClean(t, "after rotation (new secret)", r.Body, newSecret)
}

// An approved action's stored answer is scrubbed the same way.
func TestScrubAttackExecutedAction(t *testing.T) {
	up := newScrubUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	res, rev, id := brokertest.ApprovedResult(t, b, "api", "POST", "/payments", `{"amount": 1}`)
	for _, secret := range []string{brokertest.Canary, "Bearer " + brokertest.Canary} {
		scrubAssertClean(t, "executed action's answer", res.Body, secret)
		scrubAssertHeadersClean(t, "executed action's answer", res.Header, secret)
	}
	scrubAssertClean(t, "approvals list", b.Do("GET", b.Control+"/v1/approvals/"+id, rev, nil).Body, brokertest.Canary)
}

// TestScrubAttackNestedURL (class 4's neighbour): the broker injects the
// credential in the query (inject: {query: ...}); an upstream that carries
// the request's URL inside another URL (a redirect's "next=", an echo of the
// request) writes it percent-encoded twice ("%252F"), and an HTML encoder
// may write "&#X2F;". Both reached the sandbox.
func TestScrubAttackNestedURL(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := url.QueryEscape(r.URL.RequestURI()) // the secret, encoded twice
		html := strings.ReplaceAll(r.URL.Query().Get("api_key"), "/", "&#X2F;")
		w.Header().Set("Location", "/login?next="+next)
		w.Header().Set("X-Next", next)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusFound)
		fmt.Fprintf(w, `<a href="/login?next=%s">login</a> <code>%s</code>`, next, html)
	}))
	t.Cleanup(echo.Close)
	b := startBroker(t, brokertest.ProcOptions{Upstream: echo.URL})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "open", "rules": []any{map[string]any{"method": "GET", "path": "/private"}}}))
	r := b.Do("GET", b.Sandbox+"/v1/proxy/open/private", s.Token, nil)
	if r.Status != http.StatusFound {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	all := string(r.Body) + fmt.Sprint(r.Header)
	for _, form := range []string{"%252F", "&#X2F;"} {
		if strings.Contains(all, "0f1e2d3c"+form) {
			t.Errorf("the answer holds the secret written with %s: %s", form, all)
		}
	}
	if !strings.Contains(r.Header.Get("Location"), "[REDACTED]") || !strings.Contains(string(r.Body), "[REDACTED]") {
		t.Errorf("nothing was redacted: %s", all)
	}
	brokertest.AssertNoCanary(t, "answer", []byte(all))
}

// rt3Secret is a credential with the characters that quoting encoders
// escape: both quotes, a backslash, '=' (quoted-printable), a space, '<'.
const rt3Secret = `Qk3y"wi'th=quo\tes/ sl<ash`

// TestScrubAttackQuotingEncoders (class 4): an upstream echoing a
// credential that holds quotes writes it the way its encoder quotes text:
// CSV doubles '"', YAML single-quoted and SQL strings double "'", Python's
// repr and JavaScript write \', a shell quotes it '\”, PHP's
// htmlspecialchars writes &#039;, quoted-printable (e-mail bodies) writes
// '=' as =3D, YAML double-quoted and Python write \xHH, TOML and YAML
// \UXXXXXXXX. All of these reached the sandbox.
func TestScrubAttackQuotingEncoders(t *testing.T) {
	sec := rt3Secret
	forms := rt3QuotedForms(sec)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Key")
		var body bytes.Buffer
		for _, f := range rt3QuotedForms(got) {
			fmt.Fprintf(&body, "%s: %s\n", f[0], f[1])
			w.Header().Add("X-Form", f[1])
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body.Bytes())
	}))
	t.Cleanup(echo.Close)
	b := startBroker(t, brokertest.ProcOptions{Upstream: echo.URL, Env: map[string]string{"RT3_KEY": sec}, ExtraYAML: `  - name: quoted
    base_url: ` + echo.URL + `
    credential: {source: env, name: RT3_KEY}
    inject: {header: X-Key, format: "{secret}"}
`})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "quoted", "rules": []any{map[string]any{"method": "GET", "path": "/echo"}}}))
	r := b.Do("GET", b.Sandbox+"/v1/proxy/quoted/echo", s.Token, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	all := string(r.Body) + "\n" + strings.Join(r.Header.Values("X-Form"), "\n")
	for _, f := range forms {
		if strings.Contains(all, f[1]) || strings.Contains(all, "th=quo") || strings.Contains(all, "th=3Dquo") {
			t.Errorf("%s: the answer holds the credential: %q", f[0], f[1])
		}
	}
	if n := strings.Count(string(r.Body), "[REDACTED]"); n != len(forms) {
		t.Errorf("%d of %d forms redacted:\n%s", n, len(forms), r.Body)
	}
}

// rt3QuotedForms are sec as quoting encoders write it: [name, form].
func rt3QuotedForms(sec string) [][2]string {
	var csvb bytes.Buffer
	cw := csv.NewWriter(&csvb)
	_ = cw.Write([]string{sec})
	cw.Flush()
	var qp bytes.Buffer
	qw := quotedprintable.NewWriter(&qp)
	_, _ = io.WriteString(qw, sec)
	_ = qw.Close()
	py := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\t", `\t`).Replace(sec)
	return [][2]string{
		{"csv", strings.TrimSpace(csvb.String())},
		{"yaml single-quoted", "'" + strings.ReplaceAll(sec, "'", "''") + "'"},
		{"python repr", "'" + py + "'"},
		{"shell quote", "'" + strings.ReplaceAll(sec, "'", `'\''`) + "'"},
		{"php htmlspecialchars", strings.NewReplacer(`"`, "&quot;", "'", "&#039;", "<", "&lt;").Replace(sec)},
		{"quoted-printable", qp.String()},
		{"yaml double-quoted \\x", `"` + strings.NewReplacer(`"`, `\x22`, `\`, `\\`, `/`, `\x2F`).Replace(sec) + `"`},
		{"toml \\U", `"` + strings.NewReplacer(`"`, `\U00000022`, `\`, `\\`).Replace(sec) + `"`},
		{"html padded hex", strings.NewReplacer(`"`, "&#x0022;", "'", "&#x0027;", "<", "&#x003C;").Replace(sec)},
	}
}
