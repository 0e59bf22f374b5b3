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

// cmdClient runs the control-plane commands through the client package.
func cmdClient(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
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
	c := client.New(addr, token)
	group, sub, rest := args[0], args[1], args[2:]
	fs := flag.NewFlagSet(group+" "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)

	var out json.RawMessage
	do := func(method, path string, in any) error {
		if err := c.Do(ctx, method, path, in, &out); err != nil {
			return err
		}
		return printJSON(stdout, out)
	}
	var positional []string
	arg := func() (string, error) {
		if len(positional) != 1 {
			return "", fmt.Errorf("usage: broker %s %s ID", group, sub)
		}
		return url.PathEscape(positional[0]), nil
	}
	// parse accepts flags before and after positional arguments.
	parse := func() error {
		args := rest
		for {
			if err := fs.Parse(args); err != nil {
				return fmt.Errorf("broker %s %s: %w", group, sub, err)
			}
			if fs.NArg() == 0 {
				return nil
			}
			positional = append(positional, fs.Arg(0))
			args = fs.Args()[1:]
		}
	}

	switch group + " " + sub {
	case "session create":
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
		if err := parse(); err != nil {
			return err
		}
		req := map[string]any{}
		if *file != "" {
			if err := readJSONFile(*file, stdin, &req); err != nil {
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
		return do(http.MethodPost, "/v1/sessions", req)
	case "session list":
		cursor := fs.String("cursor", "", "continue after this cursor")
		limit := fs.Int("limit", 100, "page size")
		if err := parse(); err != nil {
			return err
		}
		q := url.Values{"limit": {fmt.Sprint(*limit)}}
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		return do(http.MethodGet, "/v1/sessions?"+q.Encode(), nil)
	case "session get", "session kill", "grant get", "grant revoke", "tokens revoke":
		if err := parse(); err != nil {
			return err
		}
		id, err := arg()
		if err != nil {
			return err
		}
		switch group + " " + sub {
		case "session get":
			return do(http.MethodGet, "/v1/sessions/"+id, nil)
		case "session kill":
			return do(http.MethodDelete, "/v1/sessions/"+id, nil)
		case "grant get":
			return do(http.MethodGet, "/v1/grants/"+id, nil)
		case "grant revoke":
			return do(http.MethodDelete, "/v1/grants/"+id, nil)
		default:
			if err := c.Do(ctx, http.MethodDelete, "/v1/tokens/"+id, nil, nil); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "revoked")
			return nil
		}
	case "grant add":
		file := fs.String("file", "", "grant JSON file ('-' for stdin)")
		g := fs.String("grant", "", "the grant as JSON")
		if err := parse(); err != nil {
			return err
		}
		id, err := arg()
		if err != nil {
			return err
		}
		var req json.RawMessage
		switch {
		case *g != "":
			req = json.RawMessage(*g)
		case *file != "":
			if err := readJSONFile(*file, stdin, &req); err != nil {
				return err
			}
		default:
			return errors.New("grant add needs --grant JSON or --file FILE")
		}
		return do(http.MethodPost, "/v1/sessions/"+id+"/grants", req)
	case "tokens create":
		role := fs.String("role", "", "admin|operator|reviewer|auditor")
		name := fs.String("name", "", "who or what holds it")
		ttl := fs.String("ttl", "", "lifetime, e.g. 720h (default: none)")
		if err := parse(); err != nil {
			return err
		}
		req := map[string]any{"role": *role, "name": *name}
		if *ttl != "" {
			req["ttl"] = *ttl
		}
		return do(http.MethodPost, "/v1/tokens", req)
	case "tokens list":
		return do(http.MethodGet, "/v1/tokens", nil)
	case "killswitch status":
		return do(http.MethodGet, "/v1/killswitch", nil)
	case "killswitch engage":
		reason := fs.String("reason", "", "why")
		if err := parse(); err != nil {
			return err
		}
		return do(http.MethodPost, "/v1/killswitch", map[string]string{"reason": *reason})
	case "killswitch release":
		return do(http.MethodDelete, "/v1/killswitch", nil)
	case "audit export":
		q := url.Values{}
		for _, name := range []string{"since", "until", "session_id", "task_id", "grant_id", "type", "format"} {
			fs.String(strings.ReplaceAll(name, "_", "-"), "", "filter: "+name)
		}
		bundle := fs.String("bundle", "", "write a bundle for offline verification to this directory")
		if err := parse(); err != nil {
			return err
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "bundle" {
				q.Set(strings.ReplaceAll(f.Name, "-", "_"), f.Value.String())
			}
		})
		if *bundle != "" {
			return writeBundle(ctx, c, *bundle, stdout)
		}
		return c.Stream(ctx, "/v1/audit?"+q.Encode(), stdout)
	case "audit verify":
		key := fs.String("public-key", "", "base64 Ed25519 key (or a file holding it); with a bundle directory, verifies offline")
		if err := parse(); err != nil {
			return err
		}
		if len(positional) == 1 {
			return verifyBundle(positional[0], *key, stdout)
		}
		return do(http.MethodGet, "/v1/audit/verify", nil)
	case "audit checkpoints":
		return do(http.MethodGet, "/v1/audit/checkpoints", nil)
	case "audit public-key":
		return do(http.MethodGet, "/v1/audit/public-key", nil)
	case "audit prune":
		before := fs.String("before", "", "remove records older than this RFC 3339 time")
		if err := parse(); err != nil {
			return err
		}
		if *before == "" {
			return errors.New("audit prune needs --before TIME")
		}
		return do(http.MethodDelete, "/v1/audit?"+url.Values{"before": {*before}}.Encode(), nil)
	}
	return fmt.Errorf("unknown command: broker %s %s", group, sub)
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
