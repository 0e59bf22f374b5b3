package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-broker/airlock/client"
	"github.com/airlock-broker/airlock/internal/printable"
)

// What -o table prints: one view per resource, the columns a user scans
// for. JSON (-o json, or stdout not a terminal) is the whole answer.

// table is a view's rows; next is a list's next cursor ("" at its end).
type table struct {
	header []string
	rows   [][]string
	next   string
}

func (t table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = printable.String(c) // what the server holds may not drive the terminal
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// itemsOf decodes a list answer ({"items": [...], "next": ...}) or one
// resource.
func itemsOf[T any](raw json.RawMessage) ([]T, string, error) {
	var list struct {
		Items *[]T   `json:"items"`
		Next  string `json:"next"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "", fmt.Errorf("unexpected answer: %w", err)
	}
	if list.Items != nil {
		return *list.Items, list.Next, nil
	}
	var one T
	if err := json.Unmarshal(raw, &one); err != nil {
		return nil, "", fmt.Errorf("unexpected answer: %w", err)
	}
	return []T{one}, "", nil
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// sessionsView: a token column only in a creation answer (the one place
// it is shown).
func sessionsView(raw json.RawMessage) (table, error) {
	ss, next, err := itemsOf[client.Session](raw)
	if err != nil {
		return table{}, err
	}
	withToken := len(ss) == 1 && ss[0].Token != ""
	t := table{header: []string{"ID", "TASK", "STATUS", "EXPIRES", "ISOLATION", "GATED", "GRANTS"}, next: next}
	if withToken {
		t.header = append(t.header, "TOKEN")
	}
	for _, s := range ss {
		row := []string{s.ID, orDash(s.TaskID), s.Status, when(s.ExpiresAt), orDash(s.RequiredIsolation), yesNo(s.RuleOfTwo.Gated), fmt.Sprint(len(s.Grants))}
		if withToken {
			row = append(row, s.Token)
		}
		t.rows = append(t.rows, row)
	}
	return t, nil
}

func grantsView(raw json.RawMessage) (table, error) {
	gs, next, err := itemsOf[client.Grant](raw)
	if err != nil {
		return table{}, err
	}
	t := table{header: []string{"ID", "SESSION", "UPSTREAM", "STATUS", "USES", "EXPIRES"}, next: next}
	for _, g := range gs {
		t.rows = append(t.rows, []string{g.ID, g.SessionID, g.Upstream, g.Status, fmt.Sprint(g.Uses), when(g.ExpiresAt)})
	}
	return t, nil
}

// tokensView: the secret column only in a creation answer.
func tokensView(raw json.RawMessage) (table, error) {
	ts, next, err := itemsOf[client.Token](raw)
	if err != nil {
		return table{}, err
	}
	withSecret := len(ts) == 1 && ts[0].Secret != ""
	t := table{header: []string{"ID", "ROLE", "NAME", "CREATED", "EXPIRES"}, next: next}
	if withSecret {
		t.header = append(t.header, "TOKEN")
	}
	for _, k := range ts {
		row := []string{k.ID, k.Role, k.Name, when(k.CreatedAt), when(k.ExpiresAt)}
		if withSecret {
			row = append(row, k.Secret)
		}
		t.rows = append(t.rows, row)
	}
	return t, nil
}

// approvalView is the part of an action (api/openapi.yaml Action) a
// reviewer's table shows.
type approvalView struct {
	ID                string    `json:"id"`
	SessionID         string    `json:"session_id"`
	Upstream          string    `json:"upstream"`
	Status            string    `json:"status"`
	ExpiresAt         time.Time `json:"expires_at"`
	Approvals         int       `json:"approvals"`
	ApprovalsRequired int       `json:"approvals_required"`
	Request           struct {
		Method string `json:"method"`
		Path   string `json:"path"`
	} `json:"request"`
}

func approvalsView(raw json.RawMessage) (table, error) {
	as, next, err := itemsOf[approvalView](raw)
	if err != nil {
		return table{}, err
	}
	t := table{header: []string{"ID", "SESSION", "UPSTREAM", "METHOD PATH", "STATUS", "APPROVALS", "EXPIRES"}, next: next}
	for _, a := range as {
		t.rows = append(t.rows, []string{a.ID, a.SessionID, a.Upstream, a.Request.Method + " " + a.Request.Path, a.Status,
			fmt.Sprintf("%d/%d", a.Approvals, a.ApprovalsRequired), when(a.ExpiresAt)})
	}
	return t, nil
}

func killswitchView(raw json.RawMessage) (table, error) {
	var k client.Killswitch
	if err := json.Unmarshal(raw, &k); err != nil {
		return table{}, fmt.Errorf("unexpected answer: %w", err)
	}
	return table{header: []string{"ENGAGED", "SINCE", "BY", "REASON"},
		rows: [][]string{{yesNo(k.Engaged), when(k.Since), orDash(k.By), orDash(k.Reason)}}}, nil
}
