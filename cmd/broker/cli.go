package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/airlock-broker/airlock/client"
)

type labelFlag map[string]string

func (l labelFlag) String() string { return "" }
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
func (j *jsonList) Set(v string) error {
	if !json.Valid([]byte(v)) {
		return errors.New("not valid JSON")
	}
	*j = append(*j, json.RawMessage(v))
	return nil
}

// clientCommand is one `broker GROUP SUB` command of the control-plane client.
type clientCommand struct {
	name  string // "group sub"
	usage string // its arguments, as the README's CLI section lists them
	run   func(x *clientCall) error
}

// clientCommands are the client's commands, one row each.
var clientCommands = []clientCommand{
	{"session create", "[--file FILE|-] [--task T --ttl D --isolation I --trusted-input --bind-cidr CIDR --label K=V --grant JSON]", sessionCreate},
	{"session list", "[--cursor C --limit N]", sessionList},
	{"session get", "ID", idCommand(http.MethodGet, "/v1/sessions/")},
	{"session kill", "ID", idCommand(http.MethodDelete, "/v1/sessions/")},
	{"session env", "ID [--format sh|env] [--ca-out PATH] [--ca-path PATH] [--token T]", sessionEnv},
	{"grant add", "SESSION_ID --grant JSON | --file FILE|-", grantAdd},
	{"grant get", "ID", idCommand(http.MethodGet, "/v1/grants/")},
	{"grant revoke", "ID", idCommand(http.MethodDelete, "/v1/grants/")},
	{"tokens create", "--role R --name N [--ttl D]", tokensCreate},
	{"tokens list", "", fixedCommand(http.MethodGet, "/v1/tokens")},
	{"tokens revoke", "ID", tokensRevoke},
	{"killswitch status", "", fixedCommand(http.MethodGet, "/v1/killswitch")},
	{"killswitch engage", "--reason TEXT", killswitchEngage},
	{"killswitch release", "", fixedCommand(http.MethodDelete, "/v1/killswitch")},
	{"audit export", "[--format F --session-id … --task-id … --grant-id … --type … --since … --until …] [--bundle DIR]", auditExport},
	{"audit verify", "[DIR --public-key KEY]", auditVerify},
	{"audit checkpoints", "", fixedCommand(http.MethodGet, "/v1/audit/checkpoints")},
	{"audit public-key", "", fixedCommand(http.MethodGet, "/v1/audit/public-key")},
	{"audit prune", "--before TIME", auditPrune},
}

// clientCall is one run of a client command: its client, its flags (which
// the command defines before it parses them) and where it writes.
type clientCall struct {
	ctx        context.Context
	c          *client.Client
	name       string // "group sub"
	rest       []string
	fs         *flag.FlagSet
	positional []string
	stdin      io.Reader
	stdout     io.Writer
	stderr     io.Writer
	getenv     func(string) string
}

// cmdClient runs the control-plane commands through the client package.
func cmdClient(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: broker %s <subcommand>; see broker help", args[0])
	}
	addr := getenv("AIRLOCK_ADDR")
	if addr == "" {
		addr = "http://127.0.0.1:8701"
	}
	token := getenv("AIRLOCK_TOKEN")
	offline := len(args) >= 3 && args[0] == "audit" && args[1] == "verify" && !strings.HasPrefix(args[2], "-")
	if token == "" && !offline {
		return errors.New("AIRLOCK_TOKEN is not set (an admin, operator, reviewer or auditor token)")
	}
	name := args[0] + " " + args[1]
	for _, cmd := range clientCommands {
		if cmd.name == name {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			return cmd.run(&clientCall{ctx: ctx, c: client.New(addr, token), name: name, rest: args[2:], fs: fs,
				stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv})
		}
	}
	return fmt.Errorf("unknown command: broker %s", name)
}

// parse parses the command's flags, before and after positional arguments.
func (x *clientCall) parse() error {
	args := x.rest
	for {
		if err := x.fs.Parse(args); err != nil {
			return fmt.Errorf("broker %s: %w", x.name, err)
		}
		if x.fs.NArg() == 0 {
			return nil
		}
		x.positional = append(x.positional, x.fs.Arg(0))
		args = x.fs.Args()[1:]
	}
}

// id is the one positional argument, escaped for a URL path.
func (x *clientCall) id() (string, error) {
	if len(x.positional) != 1 {
		return "", fmt.Errorf("usage: broker %s ID", x.name)
	}
	return url.PathEscape(x.positional[0]), nil
}

// do calls the control plane and prints its JSON answer.
func (x *clientCall) do(method, path string, in any) error {
	var out json.RawMessage
	if err := x.c.Do(x.ctx, method, path, in, &out); err != nil {
		return err
	}
	return printJSON(x.stdout, out)
}

// fixedCommand calls method path; it takes no flags and ignores arguments.
func fixedCommand(method, path string) func(*clientCall) error {
	return func(x *clientCall) error { return x.do(method, path, nil) }
}

// idCommand calls method prefix+ID.
func idCommand(method, prefix string) func(*clientCall) error {
	return func(x *clientCall) error {
		if err := x.parse(); err != nil {
			return err
		}
		id, err := x.id()
		if err != nil {
			return err
		}
		return x.do(method, prefix+id, nil)
	}
}

func sessionCreate(x *clientCall) error {
	fs := x.fs
	file := fs.String("file", "", "session request JSON file ('-' for stdin); flags below fill what it lacks")
	task := fs.String("task", "", "task id")
	ttl := fs.String("ttl", "", "session ttl, e.g. 10m")
	iso := fs.String("isolation", "", "process|container|gvisor|microvm")
	trusted := fs.Bool("trusted-input", false, "declare that the session reads no untrusted input")
	bind := fs.String("bind-cidr", "", "accept the token only from this address range")
	labels := labelFlag{}
	fs.Var(labels, "label", "key=value (repeatable)")
	var gs jsonList
	fs.Var(&gs, "grant", "a grant as JSON (repeatable)")
	if err := x.parse(); err != nil {
		return err
	}
	req := map[string]any{}
	if *file != "" {
		if err := readJSONFile(*file, x.stdin, &req); err != nil {
			return err
		}
	}
	set := func(k string, v any, ok bool) {
		if ok {
			req[k] = v
		}
	}
	set("task_id", *task, *task != "")
	set("ttl", *ttl, *ttl != "")
	set("isolation", *iso, *iso != "")
	set("untrusted_input", false, *trusted)
	set("bind_cidr", *bind, *bind != "")
	set("labels", map[string]string(labels), len(labels) > 0)
	set("grants", gs, len(gs) > 0)
	return x.do(http.MethodPost, "/v1/sessions", req)
}

func sessionList(x *clientCall) error {
	cursor := x.fs.String("cursor", "", "continue after this cursor")
	limit := x.fs.Int("limit", 100, "page size")
	if err := x.parse(); err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	return x.do(http.MethodGet, "/v1/sessions?"+q.Encode(), nil)
}

func grantAdd(x *clientCall) error {
	file := x.fs.String("file", "", "grant JSON file ('-' for stdin)")
	g := x.fs.String("grant", "", "the grant as JSON")
	if err := x.parse(); err != nil {
		return err
	}
	id, err := x.id()
	if err != nil {
		return err
	}
	var req json.RawMessage
	switch {
	case *g != "":
		req = json.RawMessage(*g)
	case *file != "":
		if err := readJSONFile(*file, x.stdin, &req); err != nil {
			return err
		}
	default:
		return errors.New("grant add needs --grant JSON or --file FILE")
	}
	return x.do(http.MethodPost, "/v1/sessions/"+id+"/grants", req)
}

func tokensCreate(x *clientCall) error {
	role := x.fs.String("role", "", "admin|operator|reviewer|auditor")
	name := x.fs.String("name", "", "who or what holds it")
	ttl := x.fs.String("ttl", "", "lifetime, e.g. 720h (default: none)")
	if err := x.parse(); err != nil {
		return err
	}
	req := map[string]any{"role": *role, "name": *name}
	if *ttl != "" {
		req["ttl"] = *ttl
	}
	return x.do(http.MethodPost, "/v1/tokens", req)
}

func tokensRevoke(x *clientCall) error {
	if err := x.parse(); err != nil {
		return err
	}
	id, err := x.id()
	if err != nil {
		return err
	}
	if err := x.c.Do(x.ctx, http.MethodDelete, "/v1/tokens/"+id, nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(x.stdout, "revoked")
	return nil
}

func killswitchEngage(x *clientCall) error {
	reason := x.fs.String("reason", "", "why")
	if err := x.parse(); err != nil {
		return err
	}
	return x.do(http.MethodPost, "/v1/killswitch", map[string]string{"reason": *reason})
}

func auditExport(x *clientCall) error {
	q := url.Values{}
	for _, name := range []string{"since", "until", "session_id", "task_id", "grant_id", "type", "format"} {
		x.fs.String(strings.ReplaceAll(name, "_", "-"), "", "filter: "+name)
	}
	bundle := x.fs.String("bundle", "", "write a bundle for offline verification to this directory")
	if err := x.parse(); err != nil {
		return err
	}
	x.fs.Visit(func(f *flag.Flag) {
		if f.Name != "bundle" {
			q.Set(strings.ReplaceAll(f.Name, "-", "_"), f.Value.String())
		}
	})
	if *bundle != "" {
		return writeBundle(x.ctx, x.c, *bundle, x.stdout)
	}
	return x.c.Stream(x.ctx, "/v1/audit?"+q.Encode(), x.stdout)
}

func auditVerify(x *clientCall) error {
	key := x.fs.String("public-key", "", "base64 Ed25519 key (or a file holding it); with a bundle directory, verifies offline")
	if err := x.parse(); err != nil {
		return err
	}
	if len(x.positional) == 1 {
		return verifyBundle(x.positional[0], *key, x.stdout)
	}
	return x.do(http.MethodGet, "/v1/audit/verify", nil)
}

func auditPrune(x *clientCall) error {
	before := x.fs.String("before", "", "remove records older than this RFC 3339 time")
	if err := x.parse(); err != nil {
		return err
	}
	if *before == "" {
		return errors.New("audit prune needs --before TIME")
	}
	return x.do(http.MethodDelete, "/v1/audit?"+url.Values{"before": {*before}}.Encode(), nil)
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
