package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlock-broker/airlock/internal/audit"
)

// The audit chain on PostgreSQL is one chain for every broker on the
// database, by a serialized append: each batch (one group commit of a
// broker's audit.Writer) is one transaction that locks the head row
// (audit_head, FOR UPDATE), has the writer seal the batch onto that head
// (audit.Sequencer: the same encoding and hash as on bbolt, so the offline
// verifier checks the export), inserts the records with their grants'
// usage, moves the head, and commits. Brokers' batches so take turns on
// the head row; within a broker, concurrent calls share one batch. A batch
// that cannot commit is an error: its calls are refused, nothing is sent.

var _ audit.Sequencer = (*PG)(nil)

// appendTimeout bounds one audit transaction: a database that does not
// answer fails the batch's calls (closed) rather than holding them.
const appendTimeout = 10 * time.Second

// AppendAudit implements audit.Sequencer.
// Guarded records are checked in the same round trip as the head's lock
// (killed, pgstore/changes.go), their sessions', grants' and the
// kill-switch's rows share-locked until the commit.
func (s *PG) AppendAudit(ctx context.Context, guards []audit.Guard, seal func(seq uint64, head string, refused []bool) ([]audit.Entry, error)) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if s.buffered {
			b.Queue("SET LOCAL synchronous_commit = off")
		}
		b.Queue("SELECT seq, hash FROM audit_head FOR UPDATE")
		if len(guards) > 0 {
			queueKilled(b, guards)
		}
		br := tx.SendBatch(ctx, b)
		if s.buffered {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		var (
			seq  int64
			head string
		)
		if err := br.QueryRow().Scan(&seq, &head); err != nil {
			br.Close()
			return fmt.Errorf("lock the audit head: %w", err)
		}
		var refused []bool
		if len(guards) > 0 {
			var err error
			if refused, err = readKilled(br, guards); err != nil {
				br.Close()
				return fmt.Errorf("check killed sessions: %w", err)
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		entries, err := seal(uint64(seq), head, refused)
		if err != nil {
			return err
		}
		return s.insertAudit(ctx, tx, entries)
	})
	if err != nil {
		return false, fmt.Errorf("postgres: audit append: %w", err)
	}
	return false, nil // committed: durable (fsync), or within the WAL writer's window (buffered)
}

// WriteAudit implements audit.Sink for a writer that seals records itself:
// they must follow the stored head, or nothing is written (another broker
// appended: such a writer cannot share the chain; audit.Writer uses
// AppendAudit instead).
func (s *PG) WriteAudit(ctx context.Context, entries []audit.Entry) (bool, error) {
	if len(entries) == 0 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if s.buffered {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return err
			}
		}
		var seq int64
		if err := tx.QueryRow(ctx, "SELECT seq FROM audit_head FOR UPDATE").Scan(&seq); err != nil {
			return err
		}
		if entries[0].Seq != uint64(seq)+1 {
			return fmt.Errorf("records from seq %d do not follow the stored head %d", entries[0].Seq, seq)
		}
		return s.insertAudit(ctx, tx, entries)
	})
	if err != nil {
		return false, fmt.Errorf("postgres: audit write: %w", err)
	}
	return false, nil
}

// insertAudit inserts sealed records, their grants' usage and the new head,
// in one round trip of tx.
func (s *PG) insertAudit(ctx context.Context, tx pgx.Tx, entries []audit.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	seqs := make([]int64, len(entries))
	sids := make([]string, len(entries))
	datas := make([][]byte, len(entries))
	for i, e := range entries {
		seqs[i], sids[i], datas[i] = int64(e.Seq), e.SessionID, e.Data
	}
	last := entries[len(entries)-1]
	hash, err := recordHash(last.Data)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO audit (seq, session_id, session_key, data)
		SELECT seq, nullif(sid, ''), CASE WHEN sid = '' THEN NULL ELSE sha256(convert_to(sid, 'UTF8')) END, data
		FROM unnest($1::bigint[], $2::text[], $3::bytea[]) AS r(seq, sid, data)`, seqs, sids, datas)
	for _, e := range entries {
		if e.Side != nil {
			if err := queueUsage(b, e.Side.GrantID, e.Side.Usage); err != nil {
				return err
			}
		}
	}
	b.Queue("UPDATE audit_head SET seq = $1, hash = $2", int64(last.Seq), hash)
	return tx.SendBatch(ctx, b).Close()
}

// recordHash is a sealed record's hash: its last field, `"hash":"<hex>"}`.
func recordHash(data []byte) (string, error) {
	const tail = len(`","hash":"`) + 64 + len(`"}`)
	if len(data) < tail || string(data[len(data)-tail:len(data)-tail+len(`","hash":"`)]) != `","hash":"` {
		return "", errors.New("audit record without a hash")
	}
	return string(data[len(data)-66 : len(data)-2]), nil
}

// SyncAudit implements audit.Sink: a committed record is as durable as the
// mode makes it (see the package doc); there is nothing more to sync.
func (s *PG) SyncAudit(ctx context.Context) error { return nil }

// AuditHead implements audit.Sink.
func (s *PG) AuditHead(ctx context.Context) (uint64, string, error) {
	var (
		seq  int64
		hash string
	)
	if err := s.pool.QueryRow(ctx, "SELECT seq, hash FROM audit_head").Scan(&seq, &hash); err != nil {
		return 0, "", fmt.Errorf("postgres: audit head: %w", err)
	}
	return uint64(seq), hash, nil
}

// scanChunk is how many records one query of a scan reads; fn runs on
// them once the query is done, so a slow reader holds no connection.
const scanChunk = 4096

// ScanAudit implements audit.Sink.
func (s *PG) ScanAudit(ctx context.Context, from uint64, fn func(seq uint64, data []byte) error) error {
	return s.scanChunks(ctx, from, func(next uint64) (pgx.Rows, error) {
		return s.pool.Query(ctx, `SELECT seq, data FROM audit WHERE seq >= $1 ORDER BY seq LIMIT $2`, int64(next), scanChunk)
	}, fn)
}

// ScanSessionAudit implements auditlog.Store, from the index by session.
func (s *PG) ScanSessionAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	if sessionID == "" {
		return nil
	}
	return s.scanChunks(ctx, from, func(next uint64) (pgx.Rows, error) {
		return s.pool.Query(ctx, `SELECT seq, data FROM audit
			WHERE session_key = sha256(convert_to($1, 'UTF8')) AND session_id = $1 AND seq >= $2
			ORDER BY seq LIMIT $3`, sessionID, int64(next), scanChunk)
	}, fn)
}

// LastSessionAudit implements auditlog.Store: newest first.
func (s *PG) LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	if sessionID == "" {
		return nil
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM audit
		WHERE session_key = sha256(convert_to($1, 'UTF8')) AND session_id = $1
		ORDER BY seq DESC LIMIT $2`, sessionID, limitOrAll(limit))
	if err != nil {
		return err
	}
	seqs, datas, err := collect(rows)
	if err != nil {
		return err
	}
	return deliver(ctx, seqs, datas, fn)
}

// scanChunks reads chunks of records at or after next, each by one query,
// and hands each chunk to fn; a short chunk ends the scan.
func (s *PG) scanChunks(ctx context.Context, from uint64, query func(next uint64) (pgx.Rows, error), fn func(uint64, []byte) error) error {
	next := from
	for {
		rows, err := query(next)
		if err != nil {
			return err
		}
		seqs, datas, err := collect(rows)
		if err != nil {
			return err
		}
		if err := deliver(ctx, seqs, datas, fn); err != nil {
			return err
		}
		if len(seqs) < scanChunk {
			return nil
		}
		next = seqs[len(seqs)-1] + 1
	}
}

func collect(rows pgx.Rows) ([]uint64, [][]byte, error) {
	var (
		seqs  []uint64
		datas [][]byte
	)
	for rows.Next() {
		var (
			seq  int64
			data []byte
		)
		if err := rows.Scan(&seq, &data); err != nil {
			rows.Close()
			return nil, nil, err
		}
		seqs, datas = append(seqs, uint64(seq)), append(datas, data)
	}
	return seqs, datas, rows.Err()
}

// deliver hands records to fn, stopping at the first error or when ctx ends.
func deliver(ctx context.Context, seqs []uint64, datas [][]byte, fn func(uint64, []byte) error) error {
	for i := range seqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(seqs[i], datas[i]); err != nil {
			return err
		}
	}
	return nil
}

// PutCheckpoint implements audit.Sink.
func (s *PG) PutCheckpoint(ctx context.Context, c audit.Checkpoint) error {
	_, err := s.pool.Exec(ctx, upsertCheckpoint, int64(c.Seq), c.Hash, checkpointTime(c.Time), c.Anchor, c.Signature)
	return err
}

const upsertCheckpoint = `INSERT INTO audit_checkpoints (seq, hash, time, anchor, signature) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (seq) DO UPDATE SET hash = excluded.hash, time = excluded.time, anchor = excluded.anchor, signature = excluded.signature`

// checkpointTime is a checkpoint's stored time: to the nanosecond, as its
// signature covers it (audit.Checkpoint.SignedBytes), not timestamptz's
// microsecond.
func checkpointTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Checkpoints implements audit.Sink: by seq.
func (s *PG) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, hash, time, anchor, signature FROM audit_checkpoints ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	var out []audit.Checkpoint
	for rows.Next() {
		var (
			c   audit.Checkpoint
			seq int64
			at  string
		)
		if err := rows.Scan(&seq, &c.Hash, &at, &c.Anchor, &c.Signature); err != nil {
			rows.Close()
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("checkpoint %d: time %w", seq, err)
		}
		c.Seq, c.Time = uint64(seq), t
		out = append(out, c)
	}
	return out, rows.Err()
}

// PruneAudit implements audit.Sink: the anchor stored, the records through
// it and the checkpoints before it deleted, in one transaction. The head
// row is untouched: the chain continues after the last record even when
// every record is gone.
func (s *PG) PruneAudit(ctx context.Context, anchor audit.Checkpoint) (uint64, error) {
	var deleted int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(upsertCheckpoint, int64(anchor.Seq), anchor.Hash, checkpointTime(anchor.Time), anchor.Anchor, anchor.Signature)
		b.Queue(`DELETE FROM audit WHERE seq <= $1`, int64(anchor.Seq))
		b.Queue(`DELETE FROM audit_checkpoints WHERE seq < $1`, int64(anchor.Seq))
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		deleted = tag.RowsAffected()
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune audit: %w", err)
	}
	return uint64(deleted), nil
}
