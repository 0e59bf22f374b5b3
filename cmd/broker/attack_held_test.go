package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// Class 1 of issue 19: every secret the broker holds is scrubbed from every
// answer, whichever call's answer it is. A hostile upstream (the "hub")
// remembers every credential any session's call carried to it and hands
// them all to whoever asks next: session A's minted OAuth2 token in session
// B's answer, upstream x's static credential in the answer of upstream y
// that fronts the same API. Over a thousand minted tokens are held while
// the attacker asks, through the REST door, the proxy door, a WebSocket
// relay, the AWS door and an approved action's result; and the credential
// of an upstream never called yet, which the API behind it hands out.

const hubHost = "hub.test"

// hubUpstream is a real loopback TLS upstream that records every bearer
// credential it is sent and echoes them all: at /dump in every form (a
// chosen sample) and raw (all of them), at /ws in WebSocket frames.
type hubUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	seen   map[string]bool
	sample []string // echoed in every form
	conns  []net.Conn
}

func newHubUpstream(t *testing.T, ca *brokertest.CA) *hubUpstream {
	h := &hubUpstream{seen: map[string]bool{}}
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	h.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, hubHost)}, NextProtos: []string{"http/1.1"}}
	h.StartTLS()
	t.Cleanup(func() {
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.Close()
	})
	return h
}

// startHub starts a hub and writes its CA to caFile in dir (a temp dir).
func startHub(t *testing.T) (hub *hubUpstream, dir, caFile string) {
	dir = t.TempDir()
	ca := brokertest.NewCA(t)
	caFile = filepath.Join(dir, "hub-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return newHubUpstream(t, ca), dir, caFile
}

func (h *hubUpstream) setSample(s []string) {
	h.mu.Lock()
	h.sample = s
	h.mu.Unlock()
}

// received is every credential the hub was sent.
func (h *hubUpstream) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.seen))
	for s := range h.seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// mimeWrapped is base64 of text as MIME writes it: lines of width, sep.
func mimeWrapped(text string, width int, sep string) string {
	enc := base64.StdEncoding.EncodeToString([]byte(text))
	var b strings.Builder
	for len(enc) > width {
		b.WriteString(enc[:width] + sep)
		enc = enc[width:]
	}
	b.WriteString(enc)
	return b.String()
}

// quotedPrintable is text as mime/quotedprintable writes it (lines of at
// most 76 characters, soft breaks "=\r\n"), or with LF breaks.
func quotedPrintable(text string, lf bool) string {
	var b bytes.Buffer
	w := quotedprintable.NewWriter(&b)
	_, _ = w.Write([]byte(text))
	_ = w.Close()
	if lf {
		return strings.ReplaceAll(b.String(), "\r\n", "\n")
	}
	return b.String()
}

// dump is the hub's answer: every credential raw, the sample in every form
// an upstream writes, MIME-wrapped base64 and quoted-printable placing the
// line breaks at every few offsets inside each sampled secret.
func (h *hubUpstream) dump() string {
	h.mu.Lock()
	all := make([]string, 0, len(h.seen))
	for s := range h.seen {
		all = append(all, s)
	}
	sample := h.sample
	h.mu.Unlock()
	var b strings.Builder
	for _, s := range all {
		b.WriteString("raw: " + s + "\n")
	}
	for i, s := range sample {
		for j, f := range scrubForms(s) {
			fmt.Fprintf(&b, "form %d.%d: %s;\n", i, j, f)
		}
		for j, e := range scrubEmbedded(s) {
			fmt.Fprintf(&b, "embedded %d.%d: %s;\n", i, j, e)
		}
		for k := 0; k < 12; k += 3 {
			pad := strings.Repeat("p", 50+k) // the break falls at another offset inside the secret
			for _, sep := range []string{"\r\n", "\n"} {
				fmt.Fprintf(&b, "mime76 %d.%d:\r\n%s\r\n", i, k, mimeWrapped(pad+s+" end", 76, sep))
				fmt.Fprintf(&b, "mime64 %d.%d:\r\n%s\r\n", i, k, mimeWrapped(pad+s+" end", 64, sep))
			}
			fmt.Fprintf(&b, "qp %d.%d:\r\n%s\r\n", i, k, quotedPrintable(pad+s+" end", false))
			fmt.Fprintf(&b, "qplf %d.%d:\n%s\n", i, k, quotedPrintable(pad+s+" end", true))
		}
	}
	return b.String()
}

func (h *hubUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
		h.mu.Lock()
		h.seen[tok] = true
		h.mu.Unlock()
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/ws") && strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		h.serveWS(w, r)
	case strings.HasSuffix(r.URL.Path, "/dump"), strings.HasSuffix(r.URL.Path, "/act"):
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, h.dump())
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
}

// serveWS sends each credential it holds in a text frame, the sample's
// also split across continuation frames, then "end".
func (h *hubUpstream) serveWS(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	h.mu.Lock()
	h.conns = append(h.conns, conn)
	all := make([]string, 0, len(h.seen))
	for s := range h.seen {
		all = append(all, s)
	}
	sample := h.sample
	h.mu.Unlock()
	hs := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsxAccept(r.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
	if _, err := io.WriteString(conn, hs); err != nil {
		return
	}
	var frames [][]byte
	for _, s := range all {
		frames = append(frames, wsxFrame(true, 0x1, []byte("tok="+s), false))
	}
	for _, s := range sample {
		half := len(s) / 2
		frames = append(frames, wsxFrame(false, 0x1, []byte("split:"+s[:half]), false), wsxFrame(true, 0x0, []byte(s[half:]+":end"), false))
	}
	frames = append(frames, wsxFrame(true, 0x1, []byte("end"), false))
	for _, f := range frames {
		if _, err := conn.Write(f); err != nil {
			return
		}
	}
}

// randomSecret is a credential-shaped random value.
func randomSecret(prefix string) string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// assertHeldScrubbed fails when data carries any of all raw, or any of
// sample in any form: as written, with MIME line breaks and with
// quoted-printable soft breaks taken out.
func assertHeldScrubbed(t *testing.T, what string, data []byte, all, sample []string) {
	t.Helper()
	for _, s := range all {
		if bytes.Contains(data, []byte(s)) {
			t.Fatalf("%s carries a held secret raw: %q", what, s)
		}
	}
	unsoft := bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("=\r\n"), nil), []byte("=\n"), nil)
	unwrapped := bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), nil), []byte("\n"), nil)
	for _, s := range sample {
		scrubAssertClean(t, what, data, s)
		scrubAssertClean(t, what+" (soft breaks removed)", unsoft, s)
		if enc := base64.StdEncoding.EncodeToString([]byte(s)); len(enc) > 12 {
			// Any run of the secret's own bits in the unwrapped MIME text.
			for _, p := range []string{"", "p", "pp"} {
				e := base64.StdEncoding.EncodeToString([]byte(p + s + " end"))
				core := e[(8*len(p)+5)/6 : 8*(len(p)+len(s))/6]
				if bytes.Contains(unwrapped, []byte(core)) {
					t.Fatalf("%s carries a held secret inside MIME base64: %q", what, core)
				}
			}
		}
	}
}

func TestHeldSecretsScrubbedFromEveryAnswer(t *testing.T) {
	const minted = 1000
	hub, dir, caFile := startHub(t)
	s3backend := s3mem.New()
	if err := s3backend.CreateBucket("reports"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(s3backend).Server())
	t.Cleanup(s3srv.Close)
	issuer := newFakeAuthServer(t, brokertest.Canary, time.Hour)
	secretX, secretY, secretZ := randomSecret("hubx_"), randomSecret("huby_"), randomSecret("hubz_")
	yaml := fmt.Sprintf(`  - name: hubx
    base_url: %[1]s/x
    ca_cert: %[2]s
    credential: {source: env, name: HUBX_SECRET}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: hubz
    base_url: %[1]s/z
    ca_cert: %[2]s
    credential: {source: env, name: HUBZ_SECRET}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: huby
    base_url: %[1]s
    hosts: [%[3]s]
    ca_cert: %[2]s
    credential: {source: env, name: HUBY_SECRET}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: oauth
    base_url: %[1]s/o
    ca_cert: %[2]s
    credential:
      source: oauth2
      token_url: %[4]s/oauth/token
      client_id: airlock-client
      client_secret: {source: env, name: CANARY_TOKEN}
  - name: s3
    type: aws
    service: s3
    region: us-east-1
    endpoint: %[5]s
    credential: {source: env, access_key_name: REAL_AWS_KEY_ID, secret_key_name: REAL_AWS_SECRET}
proxy_listen: 127.0.0.1:0
`, hub.URL, caFile, hubHost, issuer.URL, s3srv.URL)
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: yaml,
		Env: map[string]string{"HUBX_SECRET": secretX, "HUBY_SECRET": secretY, "HUBZ_SECRET": secretZ, "REAL_AWS_KEY_ID": "AKIAREALKEY0000", "REAL_AWS_SECRET": awsCanary}})
	e := &proxyEnv{t: t, b: b, proxy: proxyDoorAddr(t, b), dir: dir}

	// A thousand sessions each mint their own token and send it to the hub.
	oauthGrant := map[string]any{"upstream": "oauth", "rules": []any{map[string]any{"method": "GET", "path": "/ping"}}}
	var wg sync.WaitGroup
	errs := make(chan string, minted)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				s := b.Session(brokertest.TrustedSession(oauthGrant))
				if r := b.Do("GET", b.Sandbox+"/v1/proxy/oauth/ping", s.Token, nil); r.Status != 200 {
					errs <- fmt.Sprintf("%d %s", r.Status, r.Body)
				}
			}
		}()
	}
	for i := range minted {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a minting session's call: %s", e)
	}

	// The attacker: calls x (the hub now holds x's credential), then asks
	// y, the proxy door's hub.test, for everything the hub holds.
	attacker := e.session(brokertest.TrustedSession(
		map[string]any{"upstream": "hubx", "rules": []any{map[string]any{"method": "GET", "path": "/ping"}}},
		map[string]any{"upstream": "huby", "rules": []any{
			map[string]any{"method": "GET", "path": "/dump"},
			map[string]any{"method": "GET", "path": "/ws", "websocket": true},
		}}))
	if r := b.Do("GET", b.Sandbox+"/v1/proxy/hubx/ping", attacker.Token, nil); r.Status != 200 {
		t.Fatalf("call x: %d %s", r.Status, r.Body)
	}
	// z is never called through this broker, but the API behind it knows
	// its own key and hands it out too.
	hub.mu.Lock()
	hub.seen[secretZ] = true
	hub.mu.Unlock()
	held := hub.received()
	if len(held) < minted+2 {
		t.Fatalf("the hub holds %d credentials, want at least %d", len(held), minted+2)
	}
	others := slicesWithout(held, secretY) // y's own credential was always scrubbed
	sample := []string{secretX, secretZ}
	for i := 0; i < len(others) && len(sample) < 12; i += len(others) / 10 {
		if others[i] != secretX && others[i] != secretZ {
			sample = append(sample, others[i])
		}
	}
	hub.setSample(sample)
	if len(hub.dump()) < 32<<10 {
		t.Fatalf("the hub's dump is only %d bytes", len(hub.dump()))
	}

	t.Run("rest", func(t *testing.T) {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/huby/dump", attacker.Token, nil)
		if r.Status != 200 || !bytes.Contains(r.Body, []byte("raw: [REDACTED]")) {
			t.Fatalf("%d %.300s", r.Status, r.Body)
		}
		assertHeldScrubbed(t, "REST answer", r.Body, others, sample)
	})
	t.Run("proxy door", func(t *testing.T) {
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(attacker.caFile)
		pool.AppendCertsFromPEM(pem)
		pu, _ := url.Parse(e.proxyURL(attacker.Token))
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get("https://" + hubHost + "/dump")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Contains(body, []byte("raw: [REDACTED]")) {
			t.Fatalf("%d %v %.300s", resp.StatusCode, err, body)
		}
		assertHeldScrubbed(t, "proxy door answer", body, others, sample)
	})
	t.Run("websocket", func(t *testing.T) {
		host := strings.TrimPrefix(b.Sandbox, "http://")
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := wsxHandshake(t, conn, "/v1/proxy/huby/ws", host, "Authorization: Bearer "+attacker.Token)
		if c.resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(c.resp.Body)
			t.Fatalf("handshake: %d %s", c.resp.StatusCode, body)
		}
		var got bytes.Buffer
		for {
			_, _, payload := c.frame()
			if string(payload) == "end" {
				break
			}
			got.Write(payload)
			got.WriteByte('\n')
		}
		if !bytes.Contains(got.Bytes(), []byte("tok=[REDACTED]")) {
			t.Fatalf("frames: %.300s", got.Bytes())
		}
		for _, s := range others {
			if bytes.Contains(got.Bytes(), []byte(s)) {
				t.Fatalf("a frame carried a held secret: %q", s)
			}
		}
		for _, s := range sample {
			if bytes.Contains(got.Bytes(), []byte(s[len(s)/2:]+":end")) {
				t.Fatalf("the second half of a split held secret reached the sandbox: %q", s)
			}
		}
	})
	t.Run("aws door", func(t *testing.T) {
		// The object store hands back what another upstream's answers carried.
		dump := hub.dump()
		if _, err := s3backend.PutObject("reports", "t-42/dump.txt", map[string]string{}, strings.NewReader(dump), int64(len(dump)), nil); err != nil {
			t.Fatal(err)
		}
		r := b.Do("POST", b.Control+"/v1/sessions", brokertest.ProcAdminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container",
			"grants": []any{map[string]any{"upstream": "s3", "rules": []any{map[string]any{"action": "s3:GetObject", "resource": "arn:aws:s3:::reports/t-42/*"}}}}})
		var sess struct {
			AWSCredentials struct {
				AccessKeyID     string `json:"access_key_id"`
				SecretAccessKey string `json:"secret_access_key"`
			} `json:"aws_credentials"`
		}
		if err := json.Unmarshal(r.Body, &sess); err != nil || r.Status != 201 {
			t.Fatalf("aws session: %d %s", r.Status, r.Body)
		}
		c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(b.Sandbox + "/v1/aws/s3"), UsePathStyle: true,
			Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(sess.AWSCredentials.AccessKeyID, sess.AWSCredentials.SecretAccessKey, ""))})
		obj, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/dump.txt")})
		if err != nil {
			t.Fatalf("GetObject: %v", err)
		}
		body, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil || !bytes.Contains(body, []byte("raw: [REDACTED]")) {
			t.Fatalf("%v %.300s", err, body)
		}
		assertHeldScrubbed(t, "AWS door answer", body, others, sample)
	})
	t.Run("approved action", func(t *testing.T) {
		res, _, _ := brokertest.ApprovedResult(t, b, "huby", "POST", "/act", `{"go": 1}`)
		assertHeldScrubbed(t, "approved action's result", res.Body, others, sample)
	})
	logs := b.Logs.Bytes()
	audit := b.AuditExport()
	for _, s := range held {
		if bytes.Contains(logs, []byte(s)) || bytes.Contains(audit, []byte(s)) {
			t.Fatalf("a held secret reached the logs or the audit log: %q", s)
		}
	}
}

func slicesWithout(all []string, drop string) []string {
	out := make([]string, 0, len(all))
	for _, s := range all {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

// TestHeldRotatedCredentialScrubbedWithoutACall: a static credential
// rotated (its file rewritten) is held, and scrubbed from another
// upstream's answer, within the broker's refresh, though nothing calls its
// own upstream again; the one it replaced stays scrubbed (rotation grace).
func TestHeldRotatedCredentialScrubbedWithoutACall(t *testing.T) {
	hub, dir, caFile := startHub(t)
	keyFile := filepath.Join(dir, "x.key")
	old := randomSecret("filekey_old_")
	if err := os.WriteFile(keyFile, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, brokertest.ProcOptions{Upstream: brokertest.NewUpstream(t).URL, ExtraYAML: fmt.Sprintf(`  - name: hubx
    base_url: %[1]s/x
    ca_cert: %[2]s
    credential: {source: file, path: %[3]s}
    inject: {header: Authorization, format: "Bearer {secret}"}
  - name: huby
    base_url: %[1]s
    ca_cert: %[2]s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
`, hub.URL, caFile, keyFile)})
	s := b.Session(brokertest.TrustedSession(map[string]any{"upstream": "huby", "rules": []any{map[string]any{"method": "GET", "path": "/dump"}}}))
	plant := func(v string) { // the API behind x knows its own key, and hands it out
		hub.mu.Lock()
		hub.seen[v] = true
		hub.mu.Unlock()
	}
	clean := func(vs ...string) bool {
		r := b.Do("GET", b.Sandbox+"/v1/proxy/huby/dump", s.Token, nil)
		if r.Status != 200 {
			t.Fatalf("dump: %d %s", r.Status, r.Body)
		}
		for _, v := range vs {
			if bytes.Contains(r.Body, []byte(v)) {
				return false
			}
		}
		return true
	}
	plant(old)
	brokertest.Eventually(t, 20*time.Second, func() bool { return clean(old) }) // held from the start
	rotated := randomSecret("filekey_new_")
	if err := os.WriteFile(keyFile, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	plant(rotated)
	brokertest.Eventually(t, 30*time.Second, func() bool { return clean(rotated) })
	if !clean(old, rotated) {
		t.Fatal("the credential rotated out is no longer scrubbed")
	}
}
