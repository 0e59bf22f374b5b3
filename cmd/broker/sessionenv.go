package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-broker/airlock/client"
)

// sessionEnvCmd prints the environment a sandbox needs for the proxy door
// (DESIGN §8) and writes the session CA where the CA variables point.
func sessionEnvCmd(e *cliEnv) *cobra.Command {
	var o envOptions
	cmd := &cobra.Command{
		Use:   "env ID",
		Short: "Print a session's proxy-door environment (HTTPS_PROXY, CA variables, placeholders) and write its CA",
		Long: `Env prints everything a sandbox's stock clients need to reach the proxy door: the proxy
variables (the session token as the proxy password), the CA bundle variables and the
upstreams' placeholder variables; and it writes the session CA (PEM) where those point.
The CA file's folder is created (0700) when missing.`,
		Example: `  eval "$(broker session env ses_… --ca-out /tmp/airlock/ca.pem)"
  broker session env ses_… --format env --ca-out ./ca.pem --ca-path /etc/airlock/ca.pem > sandbox.env   # docker run --env-file`,
		Args: positional(cobra.ExactArgs(1)),
	}
	f := cmd.Flags()
	f.StringVar(&o.format, "format", "sh", "sh (export lines for eval) or env (KEY=VALUE lines for docker run --env-file)")
	f.StringVar(&o.caOut, "ca-out", "", "write the session CA (PEM) here (default: $XDG_CACHE_HOME/airlock/ID-ca.pem)")
	f.StringVar(&o.caPath, "ca-path", "", "the CA file's path as the sandbox sees it (default: the absolute --ca-out)")
	f.StringVar(&o.token, "token", "", "the session token, the proxy password (default: $AIRLOCK_SESSION_TOKEN)")
	return e.control(cmd, rolesOperator, nil, func(x *call, args []string) error { return sessionEnv(x, args[0], o) })
}

// envOptions are broker session env's flags.
type envOptions struct{ format, caOut, caPath, token string }

func sessionEnv(x *call, id string, o envOptions) error {
	format, caOut, caPath, token := &o.format, &o.caOut, &o.caPath, &o.token
	if *format != "sh" && *format != "env" {
		return usageError{fmt.Errorf("broker session env: --format must be sh or env")}
	}
	s, err := x.c.Session(x.ctx, id)
	if err != nil {
		return err
	}
	if s.Proxy == nil {
		return client.ErrNoProxy
	}
	out := *caOut
	if out == "" {
		dir := x.getenv("XDG_CACHE_HOME")
		if dir == "" && x.getenv("HOME") != "" {
			dir = filepath.Join(x.getenv("HOME"), ".cache")
		}
		if dir == "" {
			return fmt.Errorf("broker session env: no cache directory ($XDG_CACHE_HOME, $HOME); give --ca-out PATH")
		}
		dir = filepath.Join(dir, "airlock")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		out = filepath.Join(dir, filepath.Base(id)+"-ca.pem")
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return fmt.Errorf("the session CA's folder: %w", err)
	}
	tok := *token
	if tok == "" {
		tok = x.getenv("AIRLOCK_SESSION_TOKEN")
	}
	path := *caPath
	if path == "" {
		path = out
	}
	vars, err := client.Env(s, client.EnvOptions{Token: tok, CAFile: path, NoProxy: []string{client.HostOf(x.c.Addr)}})
	if err != nil {
		return err
	}
	text, err := client.FormatEnv(vars, *format)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(s.Proxy.CAPEM), 0o644); err != nil {
		return fmt.Errorf("write the session CA: %w", err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		return err
	}
	if tok == "" {
		fmt.Fprintf(x.stderr, "warning: no session token (--token or AIRLOCK_SESSION_TOKEN; it is shown only when the session is created): the proxy URL holds %s, replace it\n", client.TokenPlaceholder)
	}
	fmt.Fprintf(x.stderr, "session CA written to %s\n", out)
	if *format == "sh" {
		fmt.Fprintf(x.stdout, "# Airlock proxy environment for session %s.\n"+
			"# SSL_CERT_FILE replaces the system trust store for OpenSSL clients: they trust only the\n"+
			"# session CA. That is intended: the sandbox's egress goes only to granted hosts, through the broker.\n", id)
	}
	_, err = fmt.Fprint(x.stdout, text)
	return err
}
