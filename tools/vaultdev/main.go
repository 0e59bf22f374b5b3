// Command vaultdev runs an in-memory Vault v1.14.0 dev server on loopback for
// Airlock's tests: KV v2 at secret/, AppRole at auth/approle/, the AWS
// secrets engine available to mount (tests point it at a loopback IAM/STS),
// and a root token with a fixed id so a restarted server (an outage in a
// test) accepts the same token. It prints "VAULT_ADDR=..." and "VAULT_TOKEN=..." lines and
// serves until killed.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	kv "github.com/hashicorp/vault-plugin-secrets-kv"
	"github.com/hashicorp/vault/builtin/credential/approle"
	awsengine "github.com/hashicorp/vault/builtin/logical/aws"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
	testing "github.com/mitchellh/go-testing-interface"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	token := flag.String("token", "root", "id of the root token to create")
	flag.Parse()
	if err := run(*addr, *token); err != nil {
		fmt.Fprintln(os.Stderr, "vaultdev:", err)
		os.Exit(1)
	}
}

func run(addr, token string) error {
	conf := &vault.CoreConfig{
		LogicalBackends:    map[string]logical.Factory{"kv": kv.Factory, "aws": awsengine.Factory},
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
	}
	core, _, root := vault.TestCoreUnsealedWithConfig(&testing.RuntimeT{}, conf)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: vaulthttp.Handler.Handler(&vault.HandlerProperties{Core: core})}
	go func() { _ = srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	call := func(method, path string, body any) error {
		var b bytes.Buffer
		if body != nil {
			_ = json.NewEncoder(&b).Encode(body)
		}
		req, _ := http.NewRequest(method, base+"/v1/"+path, &b)
		req.Header.Set("X-Vault-Token", root)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %s", method, path, resp.Status)
		}
		return nil
	}
	// The test core mounts KV v1 at secret/: make it v2.
	steps := []struct {
		method, path string
		body         any
	}{
		{"DELETE", "sys/mounts/secret", nil},
		{"POST", "sys/mounts/secret", map[string]any{"type": "kv", "options": map[string]string{"version": "2"}}},
		{"POST", "sys/auth/approle", map[string]any{"type": "approle"}},
		{"POST", "auth/token/create", map[string]any{"id": token, "policies": []string{"root"}, "no_parent": true}},
	}
	for _, s := range steps {
		if err := call(s.method, s.path, s.body); err != nil {
			return err
		}
	}
	fmt.Printf("VAULT_ADDR=%s\nVAULT_TOKEN=%s\n", base, token)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return srv.Close()
}
