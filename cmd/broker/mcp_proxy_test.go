package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

const mcpHost = "mcp.issues.test"

// An MCP client pointed at the server's real URL, through HTTPS_PROXY
// with the session's CA, gets exactly the MCP door's checks: the tools
// filtered, the pin filled in, a different pin refused, the broker's
// credential injected and scrubbed from the answer.
func TestMCPThroughTheProxyDoor(t *testing.T) {
	up := startMCPUpstream(t)
	b, proxy := startMCPProxyBroker(t, up)
	s := b.Session(brokertest.TrustedSession(issuesGrant(nil)))
	r := b.Do("GET", b.Control+"/v1/sessions/"+s.ID+"/ca.pem", brokertest.ProcAdminToken, nil)
	roots := x509.NewCertPool()
	if r.Status != 200 || !roots.AppendCertsFromPEM(r.Body) {
		t.Fatalf("ca.pem: %d %s", r.Status, r.Body)
	}
	proxyURL, _ := url.Parse("http://airlock:" + s.Token + "@" + proxy)
	seen := &seenBodies{base: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, version := range []string{"", "2025-11-25"} {
		c := sdk.NewClient(&sdk.Implementation{Name: "stock-agent", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: "https://" + mcpHost + "/mcp",
			HTTPClient: &http.Client{Transport: seen}, DisableStandaloneSSE: true}, &sdk.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connect through the proxy door (%q): %v", version, err)
		}
		ctx := context.Background()
		list, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range list.Tools {
			if tool.Name == "delete_repo" {
				t.Fatal("a tool no rule allows is listed through the proxy door")
			}
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"title": "via proxy"}})
		if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "created in acme/web: via proxy" {
			t.Fatalf("allowed call through the proxy door: %v %+v", err, res)
		}
		_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_issue", Arguments: map[string]any{"repo": "evil/x", "title": "t"}})
		if code, airlock := rpcErr(t, err); code != -32602 || airlock != "constraint_violated" {
			t.Fatalf("pin through the proxy door: %d %q", code, airlock)
		}
		if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "leak", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		cs.Close()
	}
	for _, body := range seen.all() {
		brokertest.AssertNoCanary(t, "an answer through the proxy door", body)
	}
}

// startMCPProxyBroker serves up's handler again over TLS as the host
// mcpHost (up's own loopback server closed) and starts a broker with the
// proxy door whose issues upstream is it; it returns the broker and its
// proxy door's address.
func startMCPProxyBroker(t *testing.T, up *mcpUpstream) (*brokertest.Proc, string) {
	t.Helper()
	handler := up.srv.Config.Handler
	up.srv.Close()
	ca := brokertest.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, mcpHost)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	yaml := fmt.Sprintf(`  - name: issues
    type: mcp
    base_url: %s/mcp
    hosts: [%s]
    ca_cert: %s
    credential: {source: env, name: CANARY_TOKEN}
    inject: {header: Authorization, format: "Bearer {secret}"}
proxy_listen: 127.0.0.1:0
`, srv.URL, mcpHost, caFile)
	b := startBroker(t, brokertest.ProcOptions{Upstream: "http://127.0.0.1:1", ExtraYAML: yaml})
	return b, proxyDoorAddr(t, b)
}
