package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-broker/airlock/client"
	"github.com/airlock-broker/airlock/internal/config"
	"github.com/airlock-broker/airlock/internal/demo"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// devProxyListen is where `broker dev` puts the proxy door by default.
const devProxyListen = "127.0.0.1:8702"

// demoHost is the demo API's name through the proxy door (a reserved
// .test name: it resolves nowhere, and the proxy maps it).
const demoHost = "demo.airlock.test"

// demoSession is the session `broker dev` creates for the quickstart.
var demoSessionRequest = map[string]any{
	"task_id": "quickstart", "ttl": "1h", "untrusted_input": false, "isolation": "container",
	"labels": map[string]string{"created_by": "broker dev"},
	"grants": []any{map[string]any{
		"upstream": "demo", "max_uses": 100,
		"rules": []any{
			map[string]any{"method": "GET", "path": "/hello"},
			map[string]any{"method": "GET", "path": "/whoami"},
			map[string]any{"method": "GET", "path": "/payments"},
			map[string]any{"method": "POST", "path": "/payments", "deny_unknown": true, "constraints": map[string]any{
				"body.to":     map[string]any{"pin": "acme"},
				"body.amount": map[string]any{"min": 1, "max": 100, "required": true},
				"body.memo":   map[string]any{"max_length": 80},
			}},
		},
		"budget": map[string]any{"body.amount": 250},
	}},
}

var quickstart = template.Must(template.New("q").Parse(`
Airlock dev broker. Data lives in {{.DataDir}}{{if .Temporary}} and is thrown away on exit{{else}} and is kept on exit{{end}}.

  sandbox plane  {{.Sandbox}}
  control plane  {{.Control}}
{{- if .Proxy}}
  proxy door     {{.Proxy}}{{end}}
  admin token    {{.Admin}}
  demo upstream  {{.Demo}}  (needs a demo key that only the broker holds)

enforce_isolation is off here: a session's declared isolation is not checked against the Rule of Two's (broker serve checks it by default).

A session for task "quickstart" was created. Its values, and the admin's, are in {{.EnvFile}}:
in another shell, ". {{.EnvFile}}" sets AIRLOCK_SANDBOX, AIRLOCK_SESSION, AIRLOCK_SESSION_ID,
AIRLOCK_ADDR and AIRLOCK_TOKEN. Act as the sandbox (it holds only this token):

  export AIRLOCK_SESSION={{.Session}}

  # allowed: the broker injects the demo key
  curl -s {{.Sandbox}}/v1/proxy/demo/hello -H "Authorization: Bearer $AIRLOCK_SESSION"

  # the demo API echoes the Authorization it received; the broker scrubs the key
  curl -s {{.Sandbox}}/v1/proxy/demo/whoami -H "Authorization: Bearer $AIRLOCK_SESSION"

  # allowed: a payment within the cap; the recipient is pinned to "acme" and filled in
  curl -s {{.Sandbox}}/v1/proxy/demo/payments -H "Authorization: Bearer $AIRLOCK_SESSION" \
       -H 'Content-Type: application/json' -d '{"amount": 25}'

  # denied (constraint_violated): the model chose another recipient
  curl -s {{.Sandbox}}/v1/proxy/demo/payments -H "Authorization: Bearer $AIRLOCK_SESSION" \
       -H 'Content-Type: application/json' -d '{"to": "mallory", "amount": 25}'

  # denied (no_matching_grant): no rule allows DELETE
  curl -s -X DELETE {{.Sandbox}}/v1/proxy/demo/payments -H "Authorization: Bearer $AIRLOCK_SESSION"

{{if .Proxy}}Proxy mode: stock clients, unchanged, with only environment variables. The broker is the
sandbox's HTTPS_PROXY ({{.Proxy}}) and terminates TLS with the session's own CA; the demo API is
reached by its name, {{.DemoHost}}, and $DEMO_TOKEN is a worthless placeholder. From the
repository (bin/broker instead of "go run ./cmd/broker" after make build), write the sandbox's
environment to a file, then read it in a subshell: in your own shell it would send every later
HTTPS request through the broker.

  AIRLOCK_ADDR={{.Control}} AIRLOCK_TOKEN={{.Admin}} go run ./cmd/broker session env {{.SessionID}} --token "$AIRLOCK_SESSION" --ca-out {{.CAFile}} > {{.SandboxEnv}}

  # allowed: the broker drops the placeholder and injects the demo key
  ( . {{.SandboxEnv}}; curl -s https://{{.DemoHost}}/hello -H "Authorization: Bearer $DEMO_TOKEN" )

  # the key the demo API received is scrubbed from the answer
  ( . {{.SandboxEnv}}; curl -s https://{{.DemoHost}}/whoami )

  # denied (constraint_violated): the same grant applies inside the tunnel
  ( . {{.SandboxEnv}}; curl -s https://{{.DemoHost}}/payments -H 'Content-Type: application/json' -d '{"to": "mallory", "amount": 25}' )

  # denied (egress_denied): no grant names this host; the proxy refuses the tunnel
  ( . {{.SandboxEnv}}; curl -sS https://example.com/ )

{{end}}Act as the operator or auditor (from the repository):

  export AIRLOCK_ADDR={{.Control}} AIRLOCK_TOKEN={{.Admin}}
  go run ./cmd/broker session list
  go run ./cmd/broker session kill {{.SessionID}}
  go run ./cmd/broker audit export

Ctrl-C stops the broker.
`))

// devEnv is the quickstart's values as sh export lines, for another shell.
var devEnv = template.Must(template.New("env").Parse(`# broker dev: the quickstart's values (tokens: keep this file private)
export AIRLOCK_DEV_DIR={{.DataDir}}
export AIRLOCK_SANDBOX={{.Sandbox}}
export AIRLOCK_SESSION={{.Session}}
export AIRLOCK_SESSION_ID={{.SessionID}}
export AIRLOCK_ADDR={{.Control}}
export AIRLOCK_TOKEN={{.Admin}}
`))

func newDevCmd(e *cliEnv) *cobra.Command {
	var o devOptions
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run a throwaway broker with a demo upstream (no config) and print a quickstart",
		Long: `Dev starts a broker on loopback with a demo upstream whose key only the broker holds,
creates a session for task "quickstart" and prints copy-paste commands that act as the
sandbox, the operator and the auditor. Its data is thrown away on exit.`,
		Example: "  broker dev\n  broker dev --proxy-listen \"\"   # without the proxy door",
		Args:    positional(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmdDev(cmd.Context(), o, e.getenv, e.stdout, e.stderr)
		},
	}
	f := c.Flags()
	f.StringVar(&o.sandbox, "sandbox-listen", config.DefaultSandboxListen, "sandbox plane address")
	f.StringVar(&o.control, "control-listen", config.DefaultControlListen, "control plane address")
	f.StringVar(&o.proxy, "proxy-listen", devProxyListen, "proxy door address (\"\" turns it off)")
	f.StringVar(&o.dataDir, "data-dir", "", "data directory (default: a new temporary directory, removed on exit)")
	return c
}

// devOptions are broker dev's flags.
type devOptions struct{ sandbox, control, proxy, dataDir string }

func cmdDev(ctx context.Context, o devOptions, getenv func(string) string, stdout, stderr io.Writer) error {
	sandboxAddr, controlAddr, proxyAddr, dataDir := &o.sandbox, &o.control, &o.proxy, &o.dataDir
	temporary := *dataDir == ""
	if temporary {
		d, err := os.MkdirTemp("", "airlock-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dataDir = d
	} else if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	demoKey := "demo-" + randomHex(16)
	keyFile := filepath.Join(*dataDir, "demo.key")
	if err := os.WriteFile(keyFile, []byte(demoKey+"\n"), 0o600); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	demoSrv := &http.Server{Handler: demo.Handler(demoKey), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = demoSrv.Serve(ln) }()
	defer demoSrv.Close()

	enforce := false
	cfg := &config.Config{
		SandboxListen: *sandboxAddr, ControlListen: *controlAddr, ProxyListen: *proxyAddr, DataDir: *dataDir,
		AdminToken: "dev-admin-" + randomHex(16), EnforceIsolation: &enforce,
		Upstreams: []config.Upstream{{
			Name: "demo", BaseURL: "http://" + ln.Addr().String(),
			Credential:  config.Credential{Source: &config.FileCredential{Path: keyFile}},
			Hosts:       []string{demoHost},
			Placeholder: &config.Placeholder{Env: "DEMO_TOKEN", Format: "demo_{random:32}"},
		}, {
			// The demo MCP server (docs/mcp.md), on the same listener.
			Name: "demo-mcp", Type: "mcp", BaseURL: "http://" + ln.Addr().String() + "/mcp",
			Credential: config.Credential{Source: &config.FileCredential{Path: keyFile}},
		}},
	}
	if err := cfg.Validate(getenv); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	readyc := make(chan Addrs, 1)
	go func() { errc <- serve(ctx, cfg, getenv, io.Discard, stderr, func(a Addrs) { readyc <- a }) }()
	var addrs Addrs
	select {
	case err := <-errc:
		return err
	case addrs = <-readyc:
	}
	c := client.New(addrs.Control, cfg.AdminToken)
	sess, err := c.CreateSession(ctx, demoSessionRequest)
	if err != nil {
		cancel()
		return errors.Join(fmt.Errorf("create the demo session: %w", err), <-errc)
	}
	envFile := filepath.Join(*dataDir, "env")
	var env strings.Builder
	if err := devEnv.Execute(&env, map[string]string{
		"DataDir": client.ShellQuote(*dataDir), "Sandbox": client.ShellQuote(addrs.Sandbox),
		"Session": client.ShellQuote(sess.Token), "SessionID": client.ShellQuote(sess.ID),
		"Control": client.ShellQuote(addrs.Control), "Admin": client.ShellQuote(cfg.AdminToken),
	}); err != nil {
		cancel()
		return errors.Join(err, <-errc)
	}
	if err := os.WriteFile(envFile, []byte(env.String()), 0o600); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("write %s: %w", envFile, err), <-errc)
	}
	if err := quickstart.Execute(stdout, map[string]any{
		"DataDir": *dataDir, "Temporary": temporary, "EnvFile": envFile,
		"Sandbox": addrs.Sandbox, "Control": addrs.Control, "Admin": cfg.AdminToken,
		"Demo": "http://" + ln.Addr().String(), "Session": sess.Token, "SessionID": sess.ID,
		"Proxy": addrs.Proxy, "DemoHost": demoHost, "CAFile": filepath.Join(*dataDir, "session-ca.pem"),
		"SandboxEnv": filepath.Join(*dataDir, "sandbox.env"),
	}); err != nil {
		cancel()
		return errors.Join(err, <-errc)
	}
	return <-errc
}
