package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/killswitch"
)

// The change feed (changefeed.Feed) on PostgreSQL. A state change other
// replicas must learn at once (a session killed, a grant revoked, the
// kill-switch set, an action created or moved) writes a row of the changes
// table in its own transaction (queueChange), under an EXCLUSIVE lock of the
// table so that ids become visible in id order (a reader that has seen id n
// has seen every change below it), and pg_notify in that transaction wakes
// the listeners when it commits. Each replica follows the feed on one
// dedicated connection (not from the pool): LISTEN, then in a loop read the
// changes after the last one applied, and wait for a notification at most
// checkEvery. A lost NOTIFY is so caught by the next read, and a dead
// connection by its failure: the follower reconnects and catches up from
// the last id it applied.

var _ changefeed.Feed = (*PG)(nil)

// changesChannel is the NOTIFY channel of the change feed.
const changesChannel = "airlock_changes"

// ListenerApplicationName is the application_name of a follower's
// dedicated connection (pg_stat_activity shows it).
const ListenerApplicationName = "airlock-changes"

// checkEvery is how often a follower reads the feed without a notification.
const checkEvery = 500 * time.Millisecond

// changeRetention is how long change rows are kept (a follower that could
// not read for longer has long been refusing calls: see broker.StaleAfter).
const changeRetention = 24 * time.Hour

// queueChange queues, in b (run as one transaction), the change row and its
// notification.
func queueChange(b *pgx.Batch, kind, key string) {
	b.Queue("LOCK TABLE changes IN EXCLUSIVE MODE")
	b.Queue(`WITH c AS (INSERT INTO changes (kind, key) VALUES ($1, $2) RETURNING id)
		SELECT pg_notify('`+changesChannel+`', id::text) FROM c`, kind, key)
}

// ChangePosition implements changefeed.Feed: the last change's id.
func (s *PG) ChangePosition(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM changes").Scan(&id); err != nil {
		return 0, fmt.Errorf("postgres: change position: %w", err)
	}
	return id, nil
}

// FollowChanges implements changefeed.Feed.
func (s *PG) FollowChanges(ctx context.Context, from int64, apply func(changefeed.Change) error, current func(time.Time)) error {
	last := from
	backoff := 50 * time.Millisecond
	lastPrune := time.Time{}
	for ctx.Err() == nil {
		err := s.follow(ctx, &last, apply, current, &lastPrune)
		if ctx.Err() != nil {
			break
		}
		s.log.Warn("change feed: listener lost, reconnecting", "component", "store", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
	return nil
}

// follow runs one listener connection until it fails or ctx ends.
func (s *PG) follow(ctx context.Context, last *int64, apply func(changefeed.Change) error, current func(time.Time), lastPrune *time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = ListenerApplicationName
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+changesChannel); err != nil {
		return err
	}
	for {
		// Everything committed before asked is visible to the read below:
		// once it is applied, this replica is current as of asked.
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := conn.Query(rctx, "SELECT id, kind, key FROM changes WHERE id > $1 ORDER BY id", *last)
		var batch []changefeed.Change
		if err == nil {
			for rows.Next() {
				var c changefeed.Change
				if err = rows.Scan(&c.Pos, &c.Kind, &c.Key); err != nil {
					break
				}
				batch = append(batch, c)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		cancel()
		if err != nil {
			return err
		}
		for _, c := range batch {
			if err := apply(c); err != nil {
				return fmt.Errorf("apply change %d: %w", c.Pos, err)
			}
			*last = c.Pos
		}
		current(asked)
		if time.Since(*lastPrune) > time.Hour {
			*lastPrune = time.Now()
			if _, err := conn.Exec(ctx, "DELETE FROM changes WHERE at < now() - make_interval(secs => $1)", changeRetention.Seconds()); err != nil {
				return err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, checkEvery)
		_, err = conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		// Several notifications may be queued: one read serves them all.
	}
}

// queueKilled queues, for AppendAudit's batch, the state of the guarded
// records' sessions, grants and of the kill-switch, share-locked until the
// commit: a kill that commits later waits for the records (readKilled).
func queueKilled(b *pgx.Batch, guards []audit.Guard) {
	sids := make([]string, 0, len(guards))
	gids := make([]string, 0, len(guards))
	for _, g := range guards {
		sids = append(sids, g.SessionID)
		if g.GrantID != "" {
			gids = append(gids, g.GrantID)
		}
	}
	b.Queue(`SELECT id, revoked_at IS NOT NULL FROM sessions WHERE id = ANY($1) FOR SHARE`, sids)
	b.Queue(`SELECT id, revoked_at IS NOT NULL FROM grants WHERE id = ANY($1) FOR SHARE`, gids)
	b.Queue(`SELECT value FROM meta WHERE key = 'killswitch' FOR SHARE`)
}

// readKilled reads queueKilled's answers: refused[i] for guards[i] when its
// session is unknown or killed, its grant revoked, or the kill-switch
// engaged.
func readKilled(br pgx.BatchResults, guards []audit.Guard) ([]bool, error) {
	alive := func() (map[string]bool, error) {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		m := map[string]bool{}
		for rows.Next() {
			var (
				id      string
				revoked bool
			)
			if err := rows.Scan(&id, &revoked); err != nil {
				rows.Close()
				return nil, err
			}
			m[id] = !revoked
		}
		return m, rows.Err()
	}
	sessions, err := alive()
	if err != nil {
		return nil, err
	}
	grantsAlive, err := alive()
	if err != nil {
		return nil, err
	}
	var ks []byte
	engaged := false
	switch err := br.QueryRow().Scan(&ks); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, err
	default:
		var st killswitch.State
		if json.Unmarshal(ks, &st) != nil || st.Engaged {
			engaged = true // unreadable: closed
		}
	}
	refused := make([]bool, len(guards))
	for i, g := range guards {
		refused[i] = engaged || !sessions[g.SessionID] || g.GrantID != "" && !grantsAlive[g.GrantID]
	}
	return refused, nil
}
