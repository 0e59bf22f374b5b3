package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-broker/airlock/client"
)

// The control plane's client commands (session, grant, tokens, killswitch,
// audit here; approvals in approvals.go), through the client package.

// The roles of the token the control plane takes for a command (admin
// always): each command's help says them, and a refusal names them.
const (
	rolesOperator = "admin or operator"
	rolesStop     = "admin, operator or reviewer"
	rolesAdmin    = "admin"
	rolesReviewer = "admin or reviewer"
	rolesAuditor  = "admin or auditor"
)

// call is one run of a control-plane command.
type call struct {
	*cliEnv
	ctx    context.Context
	c      *client.Client
	format string // "table" or "json": what resource answers print as
}

// control makes cmd a control-plane command whose token must have roles
// (unless offline reports that these arguments need no server): its help
// names the roles, run gets a client, and a refused token is explained.
func (e *cliEnv) control(cmd *cobra.Command, roles string, offline func(args []string) bool, run func(x *call, args []string) error) *cobra.Command {
	long := cmd.Long
	if long == "" {
		long = cmd.Short + "."
	}
	if roles == "" {
		cmd.Long = long + "\n\nToken: none needed. AIRLOCK_ADDR: the control plane."
	} else {
		cmd.Long = long + "\n\nToken: AIRLOCK_TOKEN, an API token of role " + roles + ". AIRLOCK_ADDR: the control plane."
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		x := &call{cliEnv: e, ctx: c.Context(), format: "json"}
		if f := c.Flags().Lookup("output"); f != nil {
			switch v := f.Value.String(); v {
			case "":
				if isTerminal(e.stdout) {
					x.format = "table"
				}
			case "table", "json":
				x.format = v
			default:
				return usageError{fmt.Errorf("--output must be table or json, not %q", v)}
			}
		}
		addr := e.getenv("AIRLOCK_ADDR")
		if addr == "" {
			addr = "http://127.0.0.1:8701"
		}
		token := e.getenv("AIRLOCK_TOKEN")
		if token == "" && roles != "" && (offline == nil || !offline(args)) {
			return fmt.Errorf("AIRLOCK_TOKEN is not set: %s needs an API token of role %s", c.CommandPath(), roles)
		}
		x.c = client.New(addr, token)
		return explainRefusal(run(x, args), roles)
	}
	return cmd
}

// explainRefusal says, for a token the control plane refused (401, 403),
// which plane and which roles the command needed.
func explainRefusal(err error, roles string) error {
	var p *client.Problem
	if roles != "" && errors.As(err, &p) && (p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden) {
		return fmt.Errorf("the control plane needs an %s token (AIRLOCK_TOKEN); this one was refused: %w", roles, err)
	}
	return err
}

// addOutput gives cmd the -o flag of the commands that print resources.
func addOutput(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "", "table or json (default: table when stdout is a terminal, else json)")
}

// do calls the control plane and prints its answer: as JSON, or as the
// table view makes of it.
func (x *call) do(method, path string, in any, view func(json.RawMessage) (table, error)) error {
	var out json.RawMessage
	if err := x.c.Do(x.ctx, method, path, in, &out); err != nil {
		return err
	}
	return x.print(out, view)
}

func (x *call) print(raw json.RawMessage, view func(json.RawMessage) (table, error)) error {
	if x.format != "table" || view == nil {
		return printJSON(x.stdout, raw)
	}
	t, err := view(raw)
	if err != nil {
		return err
	}
	if err := t.write(x.stdout); err != nil {
		return err
	}
	if t.next != "" {
		fmt.Fprintf(x.stderr, "more: --cursor %s\n", t.next)
	}
	return nil
}

// simple is a command that calls method path (prefix+ID with one
// argument) and prints the answer.
func (e *cliEnv) simple(cmd *cobra.Command, roles, method, path string, view func(json.RawMessage) (table, error)) *cobra.Command {
	if view != nil {
		addOutput(cmd)
	}
	if strings.HasSuffix(path, "/") {
		cmd.Args = positional(cobra.ExactArgs(1))
	} else {
		cmd.Args = positional(cobra.NoArgs)
	}
	return e.control(cmd, roles, nil, func(x *call, args []string) error {
		p := path
		if len(args) == 1 {
			p += url.PathEscape(args[0])
		}
		return x.do(method, p, nil, view)
	})
}

func newSessionCmd(e *cliEnv) *cobra.Command {
	return group("session", "Create, list, inspect and kill sessions (a sandbox's one credential)",
		sessionCreateCmd(e),
		sessionListCmd(e),
		e.simple(&cobra.Command{Use: "get ID", Short: "Show a session with its grants",
			Example: "  broker session get ses_…"}, rolesOperator, http.MethodGet, "/v1/sessions/", sessionsView),
		e.simple(&cobra.Command{Use: "kill ID", Short: "Revoke a session at once: its token stops working, its pending actions are cancelled",
			Example: "  broker session kill ses_…"}, rolesStop, http.MethodDelete, "/v1/sessions/", sessionsView),
		sessionEnvCmd(e),
	)
}

func sessionCreateCmd(e *cliEnv) *cobra.Command {
	var file, task, ttl, iso, bind string
	var trusted bool
	labels := labelFlag{}
	var gs jsonList
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print it with its token (shown only here)",
		Long: `Create a session: from a request file (the JSON of POST /v1/sessions), from flags, or
both (the flags fill what the file lacks). Its token is in this answer only.`,
		Example: `  broker session create --task t-42 --ttl 10m --isolation microvm \
    --grant '{"upstream":"github","rules":[{"method":"GET","path":"/repos/acme/*"}]}'
  broker session create --file session.json
  broker session create --file - < session.json`,
		Args: positional(cobra.NoArgs),
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "session request JSON file ('-' for stdin); the flags below fill what it lacks")
	f.StringVar(&task, "task", "", "task id")
	f.StringVar(&ttl, "ttl", "", "session ttl, e.g. 10m")
	f.StringVar(&iso, "isolation", "", "process|container|gvisor|microvm")
	f.BoolVar(&trusted, "trusted-input", false, "declare that the session reads no untrusted input")
	f.StringVar(&bind, "bind-cidr", "", "accept the token only from this address range")
	f.Var(labels, "label", "key=value (repeatable)")
	f.Var(&gs, "grant", "a grant as JSON (repeatable)")
	addOutput(cmd)
	return e.control(cmd, rolesOperator, nil, func(x *call, _ []string) error {
		req := map[string]any{}
		if file != "" {
			if err := readJSONFile(file, x.stdin, &req); err != nil {
				return err
			}
		}
		set := func(k string, v any, ok bool) {
			if ok {
				req[k] = v
			}
		}
		set("task_id", task, task != "")
		set("ttl", ttl, ttl != "")
		set("isolation", iso, iso != "")
		set("untrusted_input", false, trusted)
		set("bind_cidr", bind, bind != "")
		set("labels", map[string]string(labels), len(labels) > 0)
		set("grants", []json.RawMessage(gs), len(gs) > 0)
		return x.do(http.MethodPost, "/v1/sessions", req, sessionsView)
	})
}

func sessionListCmd(e *cliEnv) *cobra.Command {
	var cursor string
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List sessions in creation order, a page at a time",
		Example: "  broker session list\n  broker session list --limit 20 --cursor …   # the next page\n  broker session list -o json | jq -r '.items[].id'",
		Args:    positional(cobra.NoArgs),
	}
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after this cursor")
	cmd.Flags().IntVar(&limit, "limit", 100, "page size")
	addOutput(cmd)
	return e.control(cmd, rolesOperator, nil, func(x *call, _ []string) error {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		return x.do(http.MethodGet, "/v1/sessions?"+q.Encode(), nil, sessionsView)
	})
}

func newGrantCmd(e *cliEnv) *cobra.Command {
	var file, g string
	add := &cobra.Command{
		Use:     "add SESSION_ID",
		Short:   "Add a grant to a live session",
		Example: `  broker grant add ses_… --grant '{"upstream":"github","rules":[{"method":"GET","path":"/user"}]}'` + "\n  broker grant add ses_… --file grant.json",
		Args:    positional(cobra.ExactArgs(1)),
	}
	add.Flags().StringVar(&file, "file", "", "grant JSON file ('-' for stdin)")
	add.Flags().StringVar(&g, "grant", "", "the grant as JSON")
	addOutput(add)
	e.control(add, rolesOperator, nil, func(x *call, args []string) error {
		var req json.RawMessage
		switch {
		case g != "":
			req = json.RawMessage(g)
		case file != "":
			if err := readJSONFile(file, x.stdin, &req); err != nil {
				return err
			}
		default:
			return usageError{errors.New("grant add needs --grant JSON or --file FILE")}
		}
		return x.do(http.MethodPost, "/v1/sessions/"+url.PathEscape(args[0])+"/grants", req, grantsView)
	})
	return group("grant", "Add, inspect and revoke a session's grants",
		add,
		e.simple(&cobra.Command{Use: "get ID", Short: "Show a grant with its usage", Example: "  broker grant get grt_…"},
			rolesOperator, http.MethodGet, "/v1/grants/", grantsView),
		e.simple(&cobra.Command{Use: "revoke ID", Short: "Revoke a grant at once", Example: "  broker grant revoke grt_…"},
			rolesOperator, http.MethodDelete, "/v1/grants/", grantsView),
	)
}

func newTokensCmd(e *cliEnv) *cobra.Command {
	var role, name, ttl string
	create := &cobra.Command{
		Use:     "create",
		Short:   "Create an API token and print it (its secret is shown only here)",
		Example: "  broker tokens create --role operator --name orchestrator\n  broker tokens create --role reviewer --name rita --ttl 720h",
		Args:    positional(cobra.NoArgs),
	}
	create.Flags().StringVar(&role, "role", "", "admin|operator|reviewer|auditor")
	create.Flags().StringVar(&name, "name", "", "who or what holds it")
	create.Flags().StringVar(&ttl, "ttl", "", "lifetime, e.g. 720h (default: none)")
	addOutput(create)
	e.control(create, rolesAdmin, nil, func(x *call, _ []string) error {
		req := map[string]any{"role": role, "name": name}
		if ttl != "" {
			req["ttl"] = ttl
		}
		return x.do(http.MethodPost, "/v1/tokens", req, tokensView)
	})
	revoke := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke an API token at once",
		Example: "  broker tokens revoke tok_…",
		Args:    positional(cobra.ExactArgs(1)),
	}
	e.control(revoke, rolesAdmin, nil, func(x *call, args []string) error {
		if err := x.c.RevokeToken(x.ctx, args[0]); err != nil {
			return err
		}
		_, err := fmt.Fprintln(x.stdout, "revoked")
		return err
	})
	return group("tokens", "Create, list and revoke API tokens (admin)",
		create,
		e.simple(&cobra.Command{Use: "list", Short: "List the API tokens, without their secrets", Example: "  broker tokens list"},
			rolesAdmin, http.MethodGet, "/v1/tokens", tokensView),
		revoke,
	)
}

func newKillswitchCmd(e *cliEnv) *cobra.Command {
	var reason string
	engage := &cobra.Command{
		Use:     "engage",
		Short:   "Engage the global kill-switch: every sandbox call is refused until it is released",
		Example: `  broker killswitch engage --reason "incident 42"`,
		Args:    positional(cobra.NoArgs),
	}
	engage.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit log)")
	addOutput(engage)
	e.control(engage, rolesStop, nil, func(x *call, _ []string) error {
		return x.do(http.MethodPost, "/v1/killswitch", map[string]string{"reason": reason}, killswitchView)
	})
	return group("killswitch", "Read, engage and release the global kill-switch",
		e.simple(&cobra.Command{Use: "status", Short: "Show whether the kill-switch is engaged, since when, by whom and why",
			Example: "  broker killswitch status"}, rolesStop, http.MethodGet, "/v1/killswitch", killswitchView),
		engage,
		e.simple(&cobra.Command{Use: "release", Short: "Release the kill-switch (admin)", Example: "  broker killswitch release"},
			rolesAdmin, http.MethodDelete, "/v1/killswitch", killswitchView),
	)
}

func newAuditCmd(e *cliEnv) *cobra.Command {
	export := &cobra.Command{
		Use:   "export",
		Short: "Export the audit log (JSON lines, CSV or OCSF), filtered, or as a bundle for offline verification",
		Example: `  broker audit export > audit.jsonl
  broker audit export --format csv --since 2026-12-01T00:00:00Z > audit.csv
  broker audit export --format ocsf --session-id ses_… > audit.ocsf.jsonl
  broker audit export --trace-id 4bf92f3577b34da6a3ce929d0e0e4736
  broker audit export --bundle ./audit-bundle`,
		Args: positional(cobra.NoArgs),
	}
	filters := []string{"since", "until", "session_id", "task_id", "grant_id", "trace_id", "type", "format"}
	help := map[string]string{"since": "records at or after this RFC 3339 time", "until": "records before this RFC 3339 time",
		"format": "jsonl (default), csv or ocsf", "trace_id": "only the records of the calls of this trace (32 hex digits, as in a span)"}
	for _, name := range filters {
		usage := help[name]
		if usage == "" {
			usage = "only records with this " + name
		}
		export.Flags().String(strings.ReplaceAll(name, "_", "-"), "", usage)
	}
	bundle := export.Flags().String("bundle", "", "write a bundle for offline verification to this directory")
	e.control(export, rolesAuditor, nil, func(x *call, _ []string) error {
		if *bundle != "" {
			return writeBundle(x.ctx, x.c, *bundle, x.stdout)
		}
		q := url.Values{}
		export.Flags().Visit(func(f *pflag.Flag) {
			if f.Name != "bundle" {
				q.Set(strings.ReplaceAll(f.Name, "-", "_"), f.Value.String())
			}
		})
		return x.c.Stream(x.ctx, "/v1/audit?"+q.Encode(), x.stdout)
	})

	var key string
	verify := &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Verify the audit chain: online (the broker walks it) or a bundle offline",
		Long: `Verify the audit log's hash chain and signed checkpoints. Without DIR the broker verifies
its own log; with DIR (a bundle from "broker audit export --bundle") the check is offline:
no server and no token, with a public key obtained out of band.`,
		Example: "  broker audit verify\n  broker audit verify ./audit-bundle --public-key <base64 key, or a file holding it>",
		Args:    positional(cobra.MaximumNArgs(1)),
	}
	verify.Flags().StringVar(&key, "public-key", "", "base64 Ed25519 key (or a file holding it); with a bundle directory, verifies offline")
	e.control(verify, rolesAuditor, func(args []string) bool { return len(args) == 1 }, func(x *call, args []string) error {
		if len(args) == 1 {
			return verifyBundle(args[0], key, x.stdout)
		}
		return x.do(http.MethodGet, "/v1/audit/verify", nil, nil)
	})

	var before string
	prune := &cobra.Command{
		Use:     "prune",
		Short:   "Remove audit records older than a time (admin); what remains still verifies",
		Example: "  broker audit prune --before 2026-06-01T00:00:00Z",
		Args:    positional(cobra.NoArgs),
	}
	prune.Flags().StringVar(&before, "before", "", "remove records older than this RFC 3339 time (required)")
	e.control(prune, rolesAdmin, nil, func(x *call, _ []string) error {
		if before == "" {
			return usageError{errors.New("audit prune needs --before TIME")}
		}
		return x.do(http.MethodDelete, "/v1/audit?"+url.Values{"before": {before}}.Encode(), nil, nil)
	})

	publicKey := &cobra.Command{
		Use:     "public-key",
		Short:   "Print the audit log's Ed25519 public key (needs no token)",
		Example: "  broker audit public-key",
		Args:    positional(cobra.NoArgs),
	}
	e.control(publicKey, "", nil, func(x *call, _ []string) error {
		return x.do(http.MethodGet, "/v1/audit/public-key", nil, nil)
	})
	return group("audit", "Export, verify and prune the hash-chained audit log",
		export, verify,
		e.simple(&cobra.Command{Use: "checkpoints", Short: "List the signed checkpoints of the audit chain",
			Example: "  broker audit checkpoints"}, rolesAuditor, http.MethodGet, "/v1/audit/checkpoints", nil),
		publicKey, prune,
	)
}

type labelFlag map[string]string

func (l labelFlag) String() string { return "" }
func (l labelFlag) Type() string   { return "key=value" }
func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return errors.New("label must be key=value")
	}
	l[k] = val
	return nil
}

type jsonList []json.RawMessage

func (j *jsonList) String() string { return "" }
func (j *jsonList) Type() string   { return "json" }
func (j *jsonList) Set(v string) error {
	if !json.Valid([]byte(v)) {
		return errors.New("not valid JSON")
	}
	*j = append(*j, json.RawMessage(v))
	return nil
}

func readJSONFile(path string, stdin io.Reader, v any) error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func printJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(w)
	return err
}
