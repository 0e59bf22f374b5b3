package pgstore

import (
	"context"
	"fmt"
	"github.com/airlock-broker/airlock/internal/sessions"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/session"
)

const sessionColumns = `id, task_id, token_id, created_at, expires_at, revoked_at, untrusted_input, isolation, bind_cidr, labels, created_by, traceparent`

const upsertSession = `INSERT INTO sessions (` + sessionColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
	ON CONFLICT (id) DO UPDATE SET task_id = excluded.task_id, token_id = excluded.token_id,
		created_at = excluded.created_at, expires_at = excluded.expires_at, revoked_at = excluded.revoked_at,
		untrusted_input = excluded.untrusted_input, isolation = excluded.isolation, bind_cidr = excluded.bind_cidr,
		labels = excluded.labels, created_by = excluded.created_by, traceparent = excluded.traceparent`

func sessionArgs(s *session.Session) ([]any, error) {
	labels, err := jsonValue(s.Labels, s.Labels == nil)
	if err != nil {
		return nil, err
	}
	return []any{s.ID, s.TaskID, s.TokenID, timeOrNull(s.CreatedAt), timeOrNull(s.ExpiresAt), timeOrNull(s.RevokedAt),
		s.UntrustedInput, int32(s.Isolation), s.BindCIDR, labels, s.CreatedBy, s.Traceparent}, nil
}

func scanSession(row pgx.Row) (session.Session, error) {
	var (
		s                         session.Session
		created, expires, revoked *time.Time
		isolation                 int32
		labels                    []byte
	)
	if err := row.Scan(&s.ID, &s.TaskID, &s.TokenID, &created, &expires, &revoked, &s.UntrustedInput, &isolation,
		&s.BindCIDR, &labels, &s.CreatedBy, &s.Traceparent); err != nil {
		return session.Session{}, err
	}
	s.CreatedAt, s.ExpiresAt, s.RevokedAt = timeOf(created), timeOf(expires), timeOf(revoked)
	s.Isolation = session.Isolation(isolation)
	var err error
	s.Labels, err = fromJSON[map[string]string](labels, "session labels")
	return s, err
}

// PutSession implements sessions.Store.
func (s *PG) PutSession(ctx context.Context, sess *session.Session) error {
	args, err := sessionArgs(sess)
	if err != nil {
		return err
	}
	if sess.RevokedAt.IsZero() {
		_, err = s.pool.Exec(ctx, upsertSession, args...)
		return err
	}
	b := &pgx.Batch{} // a kill: every replica learns it (changes.go)
	b.Queue(upsertSession, args...)
	queueChange(b, changefeed.SessionKilled, sess.ID)
	return s.sendTx(ctx, b)
}

// CreateSession implements sessions.Store: the session and its grants
// (with no usage) in one transaction.
func (s *PG) CreateSession(ctx context.Context, sess *session.Session, gs []grants.Grant) error {
	args, err := sessionArgs(sess)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(upsertSession, args...)
	for i := range gs {
		if err := queueGrant(b, &gs[i], grants.Usage{}); err != nil {
			return err
		}
	}
	return s.sendTx(ctx, b)
}

// sendTx runs a batch of statements as one transaction, in one round trip.
func (s *PG) sendTx(ctx context.Context, b *pgx.Batch) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
}

// Session implements sessions.Store.
func (s *PG) Session(ctx context.Context, id string) (session.Session, error) {
	out, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
	return out, noRowsAs(err, errSessionNotFound)
}

// Sessions implements sessions.Store: in id order, after after.
func (s *PG) Sessions(ctx context.Context, after string, limit int) ([]session.Session, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id > $1 ORDER BY id LIMIT $2`, after, limitOrAll(limit))
	if err != nil {
		return nil, err
	}
	var out []session.Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, sess)
	}
	return out, rows.Err()
}

const grantColumns = `g.id, g.session_id, g.task_id, g.upstream, g.ttl_ns, g.max_uses, g.approval, g.approvals_required,
	g.budget, g.rules, g.created_at, g.expires_at, g.revoked_at, g.created_by,
	coalesce(c.uses, u.uses),
	CASE WHEN c.grant_id IS NULL THEN u.spent
		ELSE coalesce((SELECT json_object_agg(sp.key, sp.spent) FROM grant_spend sp WHERE sp.grant_id = g.id), '{}'::json) END,
	coalesce(u.version, 0)`

// grantsFrom is where grantColumns are read: a grant counted in
// grant_count and grant_spend (exact limits, schema 2) has its usage from
// there, the truth; else from its snapshot in grant_usage.
const grantsFrom = `FROM grants g LEFT JOIN grant_usage u ON u.grant_id = g.id LEFT JOIN grant_count c ON c.grant_id = g.id`

const upsertGrant = `INSERT INTO grants (id, session_id, task_id, upstream, ttl_ns, max_uses, approval, approvals_required,
		budget, rules, created_at, expires_at, revoked_at, created_by)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
	ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, task_id = excluded.task_id,
		upstream = excluded.upstream, ttl_ns = excluded.ttl_ns, max_uses = excluded.max_uses, approval = excluded.approval,
		approvals_required = excluded.approvals_required, budget = excluded.budget, rules = excluded.rules,
		created_at = excluded.created_at, expires_at = excluded.expires_at, revoked_at = excluded.revoked_at,
		created_by = excluded.created_by`

// upsertUsage stores a grant's usage unless the store holds a later
// snapshot (a higher version): snapshots arrive in any order (concurrent
// calls' audit batches, a revoke racing with calls), and the usage a
// restart loads is always the latest persisted.
const upsertUsage = `INSERT INTO grant_usage (grant_id, uses, spent, version) VALUES ($1, $2, $3, $4)
	ON CONFLICT (grant_id) DO UPDATE SET uses = excluded.uses, spent = excluded.spent, version = excluded.version
	WHERE grant_usage.version <= excluded.version`

func queueGrant(b *pgx.Batch, g *grants.Grant, u grants.Usage) error {
	budget, err := jsonValue(g.Budget, g.Budget == nil)
	if err != nil {
		return err
	}
	rules, err := encodeRules(g.Rules)
	if err != nil {
		return err
	}
	b.Queue(upsertGrant, g.ID, g.SessionID, g.TaskID, g.Upstream, int64(g.TTL), g.MaxUses, g.Approval,
		int32(g.ApprovalsRequired), budget, rules, timeOrNull(g.CreatedAt), timeOrNull(g.ExpiresAt),
		timeOrNull(g.RevokedAt), g.CreatedBy)
	return queueUsage(b, g.ID, u)
}

func queueUsage(b *pgx.Batch, grantID string, u grants.Usage) error {
	spent, err := jsonValue(u.Spent, u.Spent == nil)
	if err != nil {
		return err
	}
	if u.Version > 1<<63-1 {
		return fmt.Errorf("usage version %d out of range", u.Version)
	}
	b.Queue(upsertUsage, grantID, u.Uses, spent, int64(u.Version))
	return nil
}

func scanGrant(row pgx.Row) (sessions.GrantRecord, error) {
	var (
		r                         sessions.GrantRecord
		g                         = &r.Grant
		ttl                       int64
		approvalsRequired         int32
		budget, rules, spent      []byte
		created, expires, revoked *time.Time
		uses                      *int64
		version                   *int64
	)
	if err := row.Scan(&g.ID, &g.SessionID, &g.TaskID, &g.Upstream, &ttl, &g.MaxUses, &g.Approval, &approvalsRequired,
		&budget, &rules, &created, &expires, &revoked, &g.CreatedBy, &uses, &spent, &version); err != nil {
		return r, err
	}
	g.TTL, g.ApprovalsRequired = time.Duration(ttl), int(approvalsRequired)
	g.CreatedAt, g.ExpiresAt, g.RevokedAt = timeOf(created), timeOf(expires), timeOf(revoked)
	var err error
	if g.Budget, err = fromJSON[map[string]float64](budget, "grant budget"); err != nil {
		return r, err
	}
	if g.Rules, err = decodeRules(rules); err != nil {
		return r, err
	}
	if uses != nil {
		r.Usage.Uses, r.Usage.Version = *uses, uint64(*version)
		if r.Usage.Spent, err = fromJSON[map[string]float64](spent, "grant usage"); err != nil {
			return r, err
		}
	}
	return r, nil
}

// PutGrant implements sessions.Store: the grant, and its usage unless
// a newer snapshot is stored.
func (s *PG) PutGrant(ctx context.Context, g *grants.Grant, u grants.Usage) error {
	b := &pgx.Batch{}
	if err := queueGrant(b, g, u); err != nil {
		return err
	}
	if !g.RevokedAt.IsZero() {
		queueChange(b, changefeed.GrantRevoked, g.ID) // every replica learns it (changes.go)
	}
	return s.sendTx(ctx, b)
}

// Grant implements sessions.Store.
func (s *PG) Grant(ctx context.Context, id string) (sessions.GrantRecord, error) {
	r, err := scanGrant(s.pool.QueryRow(ctx, `SELECT `+grantColumns+`
		`+grantsFrom+` WHERE g.id = $1`, id))
	return r, noRowsAs(err, errSessionNotFound)
}

// SessionGrants implements sessions.Store: in id order.
func (s *PG) SessionGrants(ctx context.Context, sessionID string) ([]sessions.GrantRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+grantColumns+`
		`+grantsFrom+` WHERE g.session_id = $1 ORDER BY g.id`, sessionID)
	if err != nil {
		return nil, err
	}
	var out []sessions.GrantRecord
	for rows.Next() {
		r, err := scanGrant(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PutToken implements apitokens.Store.
func (s *PG) PutToken(ctx context.Context, t auth.Token) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO tokens (id, name, role, digest, created_at, expires_at, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, role = excluded.role, digest = excluded.digest,
			created_at = excluded.created_at, expires_at = excluded.expires_at, created_by = excluded.created_by`,
		t.ID, t.Name, t.Role, t.Digest, timeOrNull(t.CreatedAt), timeOrNull(t.ExpiresAt), t.CreatedBy)
	return err
}

// DeleteToken implements apitokens.Store.
func (s *PG) DeleteToken(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errTokenNotFound
	}
	return nil
}

const tokenColumns = `id, name, role, digest, created_at, expires_at, created_by`

func scanToken(row pgx.Row) (auth.Token, error) {
	var (
		t                auth.Token
		created, expires *time.Time
	)
	if err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Digest, &created, &expires, &t.CreatedBy); err != nil {
		return auth.Token{}, err
	}
	t.CreatedAt, t.ExpiresAt = timeOf(created), timeOf(expires)
	return t, nil
}

// Tokens implements apitokens.Store.
func (s *PG) Tokens(ctx context.Context) ([]auth.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var out []auth.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Token implements apitokens.Store.
func (s *PG) Token(ctx context.Context, id string) (auth.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = $1`, id))
	return t, noRowsAs(err, errTokenNotFound)
}

// Meta implements meta.Store.
func (s *PG) Meta(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, key).Scan(&v)
	if err != nil {
		return nil, noRowsAs(err, errMetaNotFound)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// PutMeta implements meta.Store.
func (s *PG) PutMeta(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	const upsert = `INSERT INTO meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	if key == killswitch.MetaKey {
		b := &pgx.Batch{} // every replica learns it (changes.go)
		b.Queue(upsert, key, value)
		queueChange(b, changefeed.Killswitch, "")
		return s.sendTx(ctx, b)
	}
	_, err := s.pool.Exec(ctx, upsert, key, value)
	return err
}

// CreateMeta implements meta.Store: INSERT ... ON CONFLICT DO NOTHING,
// then a read in a statement of its own (under READ COMMITTED it sees the
// row of whichever transaction won, committed before the insert returned).
func (s *PG) CreateMeta(ctx context.Context, key string, value []byte) ([]byte, error) {
	if value == nil {
		value = []byte{}
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, key, value); err != nil {
		return nil, err
	}
	return s.Meta(ctx, key)
}
