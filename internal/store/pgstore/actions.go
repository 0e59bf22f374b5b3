package pgstore

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/changefeed"
)

const actionColumns = `id, session_id, task_id, grant_id, upstream, request_id, session_created_by, created_at, expires_at,
	status, reason, req_method, req_path, req_query, req_header, req_body, pinned, filled,
	untrusted_input, sensitive_access, external_action, approvals_required, amounts, permit_grants, decisions, result,
	owner, lease_until, mcp`

const upsertAction = `INSERT INTO actions (` + actionColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)
	ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, task_id = excluded.task_id,
		grant_id = excluded.grant_id, upstream = excluded.upstream, request_id = excluded.request_id,
		session_created_by = excluded.session_created_by, created_at = excluded.created_at, expires_at = excluded.expires_at,
		status = excluded.status, reason = excluded.reason, req_method = excluded.req_method, req_path = excluded.req_path,
		req_query = excluded.req_query, req_header = excluded.req_header, req_body = excluded.req_body,
		pinned = excluded.pinned, filled = excluded.filled, untrusted_input = excluded.untrusted_input,
		sensitive_access = excluded.sensitive_access, external_action = excluded.external_action,
		approvals_required = excluded.approvals_required, amounts = excluded.amounts,
		permit_grants = excluded.permit_grants, decisions = excluded.decisions, result = excluded.result,
		owner = excluded.owner, lease_until = excluded.lease_until, mcp = excluded.mcp`

func actionArgs(a *approval.Action) ([]any, error) {
	header, err := jsonValue(a.Request.Header, a.Request.Header == nil)
	if err != nil {
		return nil, err
	}
	amounts, err := jsonValue(a.Amounts, a.Amounts == nil)
	if err != nil {
		return nil, err
	}
	decisions, err := encodeDecisions(a.Decisions)
	if err != nil {
		return nil, err
	}
	result, err := encodeResult(a.Result)
	if err != nil {
		return nil, err
	}
	mcp, err := jsonValue(a.MCP, a.MCP == nil)
	if err != nil {
		return nil, err
	}
	return []any{a.ID, a.SessionID, a.TaskID, a.GrantID, a.Upstream, a.RequestID, a.SessionCreatedBy,
		timeOrNull(a.CreatedAt), timeOrNull(a.ExpiresAt), string(a.Status), a.Reason,
		a.Request.Method, a.Request.Path, a.Request.Query, header, a.Request.Body, a.Pinned, a.Filled,
		a.Standing.UntrustedInput, a.Standing.SensitiveAccess, a.Standing.ExternalAction,
		int32(a.ApprovalsRequired), amounts, a.PermitGrants, decisions, result,
		a.Owner, timeOrNull(a.LeaseUntil), mcp}, nil
}

func scanAction(row pgx.Row) (approval.Action, error) {
	var (
		a                                  approval.Action
		created, expires, lease            *time.Time
		status                             string
		header, amounts, decisions, result []byte
		mcp                                []byte
		approvalsRequired                  int32
	)
	err := row.Scan(&a.ID, &a.SessionID, &a.TaskID, &a.GrantID, &a.Upstream, &a.RequestID, &a.SessionCreatedBy,
		&created, &expires, &status, &a.Reason, &a.Request.Method, &a.Request.Path, &a.Request.Query,
		&header, &a.Request.Body, &a.Pinned, &a.Filled,
		&a.Standing.UntrustedInput, &a.Standing.SensitiveAccess, &a.Standing.ExternalAction,
		&approvalsRequired, &amounts, &a.PermitGrants, &decisions, &result,
		&a.Owner, &lease, &mcp)
	if err != nil {
		return a, err
	}
	a.CreatedAt, a.ExpiresAt, a.LeaseUntil = timeOf(created), timeOf(expires), timeOf(lease)
	a.Status, a.ApprovalsRequired = approval.Status(status), int(approvalsRequired)
	h, err := fromJSON[map[string][]string](header, "action header")
	if err != nil {
		return a, err
	}
	a.Request.Header = http.Header(h)
	if a.Amounts, err = fromJSON[map[string]float64](amounts, "action amounts"); err != nil {
		return a, err
	}
	if a.Decisions, err = decodeDecisions(decisions); err != nil {
		return a, err
	}
	if a.Result, err = decodeResult(result); err != nil {
		return a, err
	}
	a.MCP, err = fromJSON[*approval.MCPCall](mcp, "action mcp")
	return a, err
}

// PutAction implements approval.ActionStore.
func (s *PG) PutAction(ctx context.Context, a *approval.Action) error {
	args, err := actionArgs(a)
	if err != nil {
		return err
	}
	return retried(func() error {
		b := &pgx.Batch{} // every replica learns it (changes.go)
		b.Queue(upsertAction, args...)
		queueChange(b, changefeed.Action, a.ID)
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	})
}

// retried runs a transaction again when PostgreSQL aborted it to break a
// deadlock (40P01) or for a serialization failure (40001), at most 5
// times: writes of actions take the changes table's lock after their row
// locks, in more than one order across replicas, and each such
// transaction may run again from its start (it re-reads what it changes).
func retried(run func() error) error {
	for attempt := 1; ; attempt++ {
		err := run()
		var pe *pgconn.PgError
		if attempt < 5 && errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") {
			continue
		}
		return err
	}
}

// Action implements approval.ActionStore.
func (s *PG) Action(ctx context.Context, id string) (approval.Action, error) {
	a, err := scanAction(s.pool.QueryRow(ctx, `SELECT `+actionColumns+` FROM actions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return approval.Action{}, approval.ErrNotFound
	}
	return a, err
}

// Actions implements approval.ActionStore: newest (highest id) first.
func (s *PG) Actions(ctx context.Context, status approval.Status, limit int) ([]approval.Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM actions
		WHERE $1 = '' OR status = $1 ORDER BY id DESC LIMIT $2`, string(status), limitOrAll(limit))
	if err != nil {
		return nil, err
	}
	var out []approval.Action
	for rows.Next() {
		a, err := scanAction(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// UpdateAction implements approval.ActionStore: the row is locked (SELECT ... FOR
// UPDATE) while fn sees and changes it, so concurrent updates, on this
// broker or another, run one after the other on the latest stored action:
// exactly one caller wins a transition. A transition from pending to
// denied, expired or failed gives back the action's reservation on its
// grant's count in the same transaction (usage.Store).
func (s *PG) UpdateAction(ctx context.Context, id string, fn func(*approval.Action) error) (approval.Action, error) {
	var out approval.Action
	err := retried(func() error { return s.updateAction(ctx, id, fn, &out) })
	return out, err
}

// updateAction is one attempt of UpdateAction.
func (s *PG) updateAction(ctx context.Context, id string, fn func(*approval.Action) error, out *approval.Action) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := scanAction(tx.QueryRow(ctx, `SELECT `+actionColumns+` FROM actions WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return approval.ErrNotFound
		}
		if err != nil {
			return err
		}
		was := a.Status
		if err := fn(&a); err != nil {
			return err
		}
		args, err := actionArgs(&a)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(upsertAction, args...)
		if was == approval.Pending && leftUnsent(a.Status) {
			// Its reservation goes back in the transition's transaction:
			// once, by the one winner, whichever replica counted it
			// (usage.Store). An unlimited grant has no row: nothing.
			keys, amts := decimals(a.Amounts)
			b.Queue(`SELECT airlock_release($1, $2::text[], $3::text[]::numeric[])`, a.GrantID, keys, amts)
		}
		queueChange(b, changefeed.Action, a.ID) // every replica learns it (changes.go)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		*out = a
		return nil
	})
}

// leftUnsent reports whether an action that was pending and is now in
// status st left pending without being sent (denied, expired, failed).
func leftUnsent(st approval.Status) bool {
	return st == approval.Denied || st == approval.Expired || st == approval.Failed
}

// PendingSummary implements approval.ActionStore: one aggregate over the
// pending actions' index.
func (s *PG) PendingSummary(ctx context.Context) (n int, oldest time.Time, err error) {
	var (
		count int64
		min   *time.Time
	)
	err = s.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM actions WHERE status = 'pending'`).Scan(&count, &min)
	if err != nil {
		return 0, time.Time{}, err
	}
	return int(count), timeOf(min), nil
}
