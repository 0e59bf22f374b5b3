package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-broker/airlock/client"
)

// newApprovalsCmd is the reviewers' commands: the gated calls waiting for
// a human (api/openapi.yaml /v1/approvals), as the approval UI shows them.
func newApprovalsCmd(e *cliEnv) *cobra.Command {
	var status string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List actions (gated calls), newest first: the pending ones unless --status says otherwise",
		Example: `  broker approvals list
  broker approvals list --status executed --limit 20
  broker approvals list --status all -o json`,
		Args: positional(cobra.NoArgs),
	}
	list.Flags().StringVar(&status, "status", "pending", "pending, executing, executed, denied, expired, failed, or all")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many (1 to 1000)")
	addOutput(list)
	e.control(list, rolesReviewer, nil, func(x *call, _ []string) error {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if status != "all" {
			q.Set("status", status)
		}
		return x.do(http.MethodGet, "/v1/approvals?"+q.Encode(), nil, approvalsView)
	})

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show an action: the exact request that would be sent, pinned and filled parameters, decisions",
		Example: `  broker approvals show act_…
  broker approvals show act_… -o json | jq -r .request.body`,
		Args: positional(cobra.ExactArgs(1)),
	}
	addOutput(show)
	e.control(show, rolesReviewer, nil, func(x *call, args []string) error {
		return x.do(http.MethodGet, "/v1/approvals/"+url.PathEscape(args[0]), nil, approvalsView)
	})

	decide := func(verdict, short, example string) *cobra.Command {
		var comment string
		c := &cobra.Command{Use: verdict + " ID", Short: short, Example: example, Args: positional(cobra.ExactArgs(1))}
		c.Flags().StringVar(&comment, "comment", "", "why (recorded with the decision and in the audit log)")
		addOutput(c)
		return e.control(c, rolesReviewer, nil, func(x *call, args []string) error {
			in := map[string]string{}
			if comment != "" {
				in["comment"] = comment
			}
			return x.do(http.MethodPost, "/v1/approvals/"+url.PathEscape(args[0])+"/"+verdict, in, approvalsView)
		})
	}
	approve := decide("approve", "Approve an action; the approval that reaches its quorum executes it, once",
		`  broker approvals approve act_… --comment "matches ticket 42"`)
	deny := decide("deny", "Deny an action: it can never run", `  broker approvals deny act_… --comment "wrong recipient"`)

	var timeout, interval time.Duration
	wait := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait until an action is final (executed, denied, expired, failed) and print it",
		Long: `Wait reads the action until it can no longer change and prints it: exit 0 when it was
executed, 1 when it was denied, expired or failed (or the wait timed out).`,
		Example: `  broker approvals approve act_… && broker approvals wait act_…
  broker approvals wait act_… --timeout 30m`,
		Args: positional(cobra.ExactArgs(1)),
	}
	wait.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "give up after this long")
	wait.Flags().DurationVar(&interval, "interval", time.Second, "how often to read the action")
	addOutput(wait)
	e.control(wait, rolesReviewer, nil, func(x *call, args []string) error {
		if interval <= 0 {
			return usageError{errors.New("--interval must be positive")}
		}
		raw, a, err := waitFinal(x.ctx, x.c, args[0], timeout, interval)
		if err != nil {
			return err
		}
		if err := x.print(raw, approvalsView); err != nil {
			return err
		}
		if a.Status != "executed" {
			return fmt.Errorf("action %s %s", a.ID, a.Status)
		}
		return nil
	})

	return group("approvals", "Review gated calls: list, show, approve, deny, wait (reviewer)",
		list, show, approve, deny, wait)
}

// waitFinal reads action id every interval until it is final or timeout
// passes.
func waitFinal(ctx context.Context, c *client.Client, id string, timeout, interval time.Duration) (json.RawMessage, client.ActionStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		raw, err := c.Approval(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil, client.ActionStatus{}, fmt.Errorf("action %s: not final after %s", id, timeout)
			}
			return nil, client.ActionStatus{}, err
		}
		var a client.ActionStatus
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, a, fmt.Errorf("unexpected answer: %w", err)
		}
		if a.Final() {
			return raw, a, nil
		}
		select {
		case <-ctx.Done():
			return nil, a, fmt.Errorf("action %s: still %s after %s", id, a.Status, timeout)
		case <-tick.C:
		}
	}
}
