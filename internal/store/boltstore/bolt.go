// Package boltstore is the embedded store.Store: one bbolt file, with the
// audit chain written through a write-ahead journal (internal/store/wal).
package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlock-broker/airlock/internal/apitokens"
	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/meta"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/wal"
)

var (
	bucketMeta          = []byte("meta")
	bucketSessions      = []byte("sessions")
	bucketGrants        = []byte("grants")
	bucketUsage         = []byte("usage")
	bucketSessionGrants = []byte("session_grants")
	bucketTokens        = []byte("tokens")
	bucketAudit         = []byte("audit")
	bucketActions       = []byte("actions")
	bucketPending       = []byte("actions_pending")
	bucketCheckpoints   = []byte("audit_checkpoints")
)

// SyncInterval bounds the unsynced window in buffered mode.
const SyncInterval = wal.SyncInterval

// Bolt is the bbolt store. Audit records go through a write-ahead journal
// (one write per group commit, plus one fdatasync in fsync mode) and reach
// bbolt in large batches; every other write is a bbolt transaction followed
// by an fdatasync.
type Bolt struct {
	db  *bolt.DB
	log *slog.Logger
	wal *wal.Log // the audit journal and its applier (applyEntries)

	// live is held (read) by every write and sync, and (write) by Close, so
	// a late writer (an approved action finishing during shutdown) gets
	// errClosed instead of racing with the files being closed.
	live     sync.RWMutex
	closed   bool
	closeErr error
	once     sync.Once
}

// journalLimit is the size at which the journal's current file is sealed
// (and, once applied, deleted).
const journalLimit = 32 << 20

// OpenBolt opens (creating) the database file at path.
func OpenBolt(path, durability string, log *slog.Logger) (*Bolt, error) {
	switch durability {
	case "", store.DurabilityFsync, store.DurabilityBuffered:
	default:
		return nil, fmt.Errorf("unknown audit durability %q", durability)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: time.Second,
		NoSync:  true, // durability comes from the journal and explicit syncs (update)
		// The audit log is append-heavy: do not rewrite the freelist on every
		// commit (it is rebuilt on open), and map enough up front that growth
		// rarely remaps under the writer.
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: 256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketSessions, bucketGrants, bucketUsage, bucketSessionGrants, bucketTokens, bucketAudit, bucketActions, bucketPending, bucketCheckpoints, bucketAuditSessions} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	if err := buildSessionIndex(db); err != nil {
		db.Close()
		return nil, err
	}
	s := &Bolt{db: db, log: log}
	// Records acknowledged before a crash but not yet in bbolt are in the
	// journal: opening it replays them.
	s.wal, err = wal.Open(wal.Options{
		Path: path + ".journal", Limit: journalLimit, Buffered: durability == store.DurabilityBuffered,
		Apply: s.applyEntries, Codec: wal.SideCodec{Encode: encodeSide, Decode: decodeSide},
		MaxBacklog: maxPending, Log: log,
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// applyEntries writes journaled records (and their side effects) to bbolt
// and syncs it; records already there (a replay after a crash) are skipped.
func (s *Bolt) applyEntries(entries []audit.Entry) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		b.FillPercent = 1 // keys only ever grow: fill pages instead of splitting them in half
		var index indexBatch
		last, _ := b.Cursor().Last()
		var head uint64
		if last != nil {
			head = binary.BigEndian.Uint64(last)
		}
		for _, e := range entries {
			if e.Seq <= head && last != nil {
				continue
			}
			if err := b.Put(seqKey(e.Seq), e.Data); err != nil {
				return err
			}
			index.add(e.Seq, e.Data)
			if u := e.Side; u != nil {
				if err := putUsage(tx, u.GrantID, u.Usage); err != nil {
					return err
				}
			}
		}
		return index.write(tx.Bucket(bucketAuditSessions))
	})
	if err != nil {
		return err
	}
	return s.db.Sync()
}

// maxPending bounds the records written to the journal but not yet in
// bbolt (wal.Options.MaxBacklog). A variable for tests.
var maxPending uint64 = wal.DefaultMaxBacklog

// flushAudit waits until every journaled record is in bbolt (readers of the
// log call it first).
func (s *Bolt) flushAudit() error { return s.wal.Flush() }

// DB exposes the bbolt handle (tests run consistency checks on it).
func (s *Bolt) DB() *bolt.DB { return s.db }

// update runs fn in a write transaction and syncs it: state that is not
// audit (sessions, grants, tokens, actions) is durable before return in
// both durability modes.
func (s *Bolt) update(fn func(tx *bolt.Tx) error) error {
	s.live.RLock()
	defer s.live.RUnlock()
	if s.closed {
		return errClosed
	}
	if err := s.db.Update(fn); err != nil {
		return err
	}
	return s.db.Sync()
}

var errClosed = errors.New("store closed")

// The not-found errors of the ports (see sessions.Store,
// apitokens.Store, meta.Store; approval.ActionStore's is approval.ErrNotFound itself).
var (
	errSessionNotFound = store.PortNotFound(sessions.ErrNotFound)
	errTokenNotFound   = store.PortNotFound(apitokens.ErrNotFound)
	errMetaNotFound    = store.PortNotFound(meta.ErrNotFound)
)

// notFoundAs turns get's store.ErrNotFound into a port's not-found error.
func notFoundAs(err, portErr error) error {
	if errors.Is(err, store.ErrNotFound) {
		return portErr
	}
	return err
}

// put stores a record (records.go) encoded by encode.
func put[T any](tx *bolt.Tx, bucket []byte, key string, v T, encode func(T) ([]byte, error)) error {
	data, err := encode(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put([]byte(key), data)
}

// get decodes a stored record (records.go), or returns store.ErrNotFound
// (a port's method turns it into the port's own error: notFoundAs).
func get[T any](tx *bolt.Tx, bucket []byte, key string, decode func([]byte) (T, error)) (T, error) {
	data := tx.Bucket(bucket).Get([]byte(key))
	if data == nil {
		var zero T
		return zero, store.ErrNotFound
	}
	return decode(data)
}

// WriteAudit implements audit.Sink: one journal write for the whole batch;
// the applier moves it into bbolt. In fsync mode the batch is durable after
// the next SyncAudit; in buffered mode the sync loop syncs within
// SyncInterval.
func (s *Bolt) WriteAudit(ctx context.Context, entries []audit.Entry) (needSync bool, err error) {
	s.live.RLock()
	defer s.live.RUnlock()
	if s.closed {
		return false, errClosed
	}
	return s.wal.Write(entries) // the data is ours to keep (audit.Sink)
}

// SyncAudit implements audit.Sink: one fdatasync of the journal.
func (s *Bolt) SyncAudit(ctx context.Context) error {
	s.live.RLock()
	defer s.live.RUnlock()
	if s.closed {
		return errClosed
	}
	return s.wal.Sync()
}

// AuditHead implements audit.Sink.
func (s *Bolt) AuditHead(ctx context.Context) (uint64, string, error) {
	if err := s.flushAudit(); err != nil {
		return 0, "", err
	}
	var (
		seq  uint64
		hash string
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketAudit).Cursor().Last()
		if k == nil {
			// Everything was pruned: the chain continues from the last checkpoint.
			if ck, cv := tx.Bucket(bucketCheckpoints).Cursor().Last(); ck != nil {
				c, err := decodeCheckpoint(cv)
				if err != nil {
					return err
				}
				seq, hash = c.Seq, c.Hash
			}
			return nil
		}
		var e struct {
			Seq  uint64 `json:"seq"`
			Hash string `json:"hash"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("decode last audit record: %w", err)
		}
		seq, hash = binary.BigEndian.Uint64(k), e.Hash
		return nil
	})
	return seq, hash, err
}

// ScanAudit implements audit.Sink. It reads in chunks of short read
// transactions so a long export does not pin the database.
func (s *Bolt) ScanAudit(ctx context.Context, from uint64, fn func(seq uint64, data []byte) error) error {
	if err := s.flushAudit(); err != nil {
		return err
	}
	return s.scanChunks(ctx, from, func(tx *bolt.Tx, next uint64, seqs []uint64, buf [][]byte) ([]uint64, [][]byte) {
		c := tx.Bucket(bucketAudit).Cursor()
		var key [8]byte
		binary.BigEndian.PutUint64(key[:], next)
		for k, v := c.Seek(key[:]); k != nil && len(buf) < scanChunk; k, v = c.Next() {
			seqs = append(seqs, binary.BigEndian.Uint64(k))
			buf = append(buf, bytes.Clone(v))
		}
		return seqs, buf
	}, fn)
}

// scanChunk is how many records one read transaction of a scan reads.
const scanChunk = 1024

// scanChunks runs a scan from seq from on: read, in a short read
// transaction of its own, appends up to scanChunk records at or after next
// (copied out), which are handed to fn once the transaction closed; a
// chunk short of scanChunk ends the scan.
func (s *Bolt) scanChunks(ctx context.Context, from uint64, read func(tx *bolt.Tx, next uint64, seqs []uint64, buf [][]byte) ([]uint64, [][]byte), fn func(seq uint64, data []byte) error) error {
	next := from
	buf := make([][]byte, 0, scanChunk)
	seqs := make([]uint64, 0, scanChunk)
	for {
		err := s.db.View(func(tx *bolt.Tx) error {
			seqs, buf = read(tx, next, seqs[:0], buf[:0])
			return nil
		})
		if err != nil {
			return err
		}
		if err := deliver(ctx, seqs, buf, fn); err != nil {
			return err
		}
		if len(buf) < scanChunk {
			return nil
		}
		next = seqs[len(seqs)-1] + 1
	}
}

// deliver hands records read in one transaction to fn, after it closed,
// stopping at the first error or when ctx ends.
func deliver(ctx context.Context, seqs []uint64, buf [][]byte, fn func(uint64, []byte) error) error {
	for i := range buf {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(seqs[i], buf[i]); err != nil {
			return err
		}
	}
	return nil
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// PutCheckpoint implements audit.Sink.
func (s *Bolt) PutCheckpoint(ctx context.Context, c audit.Checkpoint) error {
	data, err := encodeCheckpoint(c)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketCheckpoints).Put(seqKey(c.Seq), data) })
}

// Checkpoints implements audit.Sink.
func (s *Bolt) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	return all(s.db, bucketCheckpoints, decodeCheckpoint)
}

// all decodes every record of a bucket, in key order.
func all[T any](db *bolt.DB, bucket []byte, decode func([]byte) (T, error)) ([]T, error) {
	var out []T
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			x, err := decode(v)
			if err != nil {
				return err
			}
			out = append(out, x)
			return nil
		})
	})
	return out, err
}

// PruneAudit implements audit.Sink: deletes in chunks of one transaction each,
// the anchor first, so an interruption leaves a verifiable log.
func (s *Bolt) PruneAudit(ctx context.Context, anchor audit.Checkpoint) (uint64, error) {
	if err := s.flushAudit(); err != nil {
		return 0, err
	}
	if err := s.PutCheckpoint(ctx, anchor); err != nil {
		return 0, err
	}
	var deleted uint64
	for {
		n := 0
		err := s.update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketAudit).Cursor()
			sessions := map[string]struct{}{} // whose index entries go with the records
			var through uint64
			for k, v := c.First(); k != nil && binary.BigEndian.Uint64(k) <= anchor.Seq && n < 10000; k, v = c.First() {
				through = binary.BigEndian.Uint64(k)
				if sid, ok := recordSessionID(v); ok && indexable(sid) {
					sessions[sid] = struct{}{}
				}
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
			if err := pruneIndex(tx.Bucket(bucketAuditSessions), sessions, through); err != nil {
				return err
			}
			// Checkpoints before the anchor name records that are gone.
			cc := tx.Bucket(bucketCheckpoints).Cursor()
			for k, _ := cc.First(); k != nil && binary.BigEndian.Uint64(k) < anchor.Seq; k, _ = cc.First() {
				if err := cc.Delete(); err != nil {
					return err
				}
			}
			return nil
		})
		deleted += uint64(n)
		if err != nil || n < 10000 {
			return deleted, err
		}
	}
}

// PutSession implements Store.
func (s *Bolt) PutSession(ctx context.Context, sess *session.Session) error {
	return s.update(func(tx *bolt.Tx) error { return put(tx, bucketSessions, sess.ID, sess, encodeSession) })
}

// CreateSession implements Store.
func (s *Bolt) CreateSession(ctx context.Context, sess *session.Session, gs []grants.Grant) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := put(tx, bucketSessions, sess.ID, sess, encodeSession); err != nil {
			return err
		}
		for i := range gs {
			if err := putGrant(tx, &gs[i], grants.Usage{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Session implements Store.
func (s *Bolt) Session(ctx context.Context, id string) (session.Session, error) {
	var out session.Session
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		out, err = get(tx, bucketSessions, id, decodeSession)
		return err
	})
	return out, notFoundAs(err, errSessionNotFound)
}

// Sessions implements Store.
func (s *Bolt) Sessions(ctx context.Context, after string, limit int) ([]session.Session, error) {
	var out []session.Session
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSessions).Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			sess, err := decodeSession(v)
			if err != nil {
				return err
			}
			out = append(out, sess)
		}
		return nil
	})
	return out, err
}

// PutGrant implements Store.
func (s *Bolt) PutGrant(ctx context.Context, g *grants.Grant, u grants.Usage) error {
	return s.update(func(tx *bolt.Tx) error { return putGrant(tx, g, u) })
}

func putGrant(tx *bolt.Tx, g *grants.Grant, u grants.Usage) error {
	if err := put(tx, bucketGrants, g.ID, g, encodeGrant); err != nil {
		return err
	}
	if err := putUsage(tx, g.ID, u); err != nil {
		return err
	}
	return tx.Bucket(bucketSessionGrants).Put([]byte(g.SessionID+"/"+g.ID), nil)
}

// putUsage stores a grant's usage unless the store already holds a later
// snapshot (a higher Version). Snapshots reach the store in any order:
// concurrent calls take theirs before their audit records are sequenced,
// and grant writes (a kill, a revoke) race with the journal's applier. So
// the usage a restart loads is always the latest one persisted, never an
// older, smaller one.
func putUsage(tx *bolt.Tx, grantID string, u grants.Usage) error {
	if old := tx.Bucket(bucketUsage).Get([]byte(grantID)); old != nil {
		var cur struct {
			Version uint64 `json:"Version"` // usageRecord's, without decoding the rest
		}
		if err := json.Unmarshal(old, &cur); err != nil {
			return fmt.Errorf("decode usage of %s: %w", grantID, err)
		}
		if cur.Version > u.Version {
			return nil
		}
	}
	return put(tx, bucketUsage, grantID, u, encodeUsage)
}

// Grant implements Store.
func (s *Bolt) Grant(ctx context.Context, id string) (sessions.GrantRecord, error) {
	if err := s.flushAudit(); err != nil { // usage rides with audit records
		return sessions.GrantRecord{}, err
	}
	var out sessions.GrantRecord
	err := s.db.View(func(tx *bolt.Tx) error { return getGrant(tx, id, &out) })
	return out, notFoundAs(err, errSessionNotFound)
}

func getGrant(tx *bolt.Tx, id string, out *sessions.GrantRecord) error {
	g, err := get(tx, bucketGrants, id, decodeGrant)
	if err != nil {
		return err
	}
	u, err := get(tx, bucketUsage, id, decodeUsage)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	out.Grant, out.Usage = g, u
	return nil
}

// SessionGrants implements Store.
func (s *Bolt) SessionGrants(ctx context.Context, sessionID string) ([]sessions.GrantRecord, error) {
	if err := s.flushAudit(); err != nil { // usage rides with audit records
		return nil, err
	}
	var out []sessions.GrantRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := []byte(sessionID + "/")
		c := tx.Bucket(bucketSessionGrants).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			var r sessions.GrantRecord
			if err := getGrant(tx, string(k[len(prefix):]), &r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// PutToken implements Store.
func (s *Bolt) PutToken(ctx context.Context, t auth.Token) error {
	return s.update(func(tx *bolt.Tx) error { return put(tx, bucketTokens, t.ID, t, encodeToken) })
}

// DeleteToken implements Store.
func (s *Bolt) DeleteToken(ctx context.Context, id string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTokens)
		if b.Get([]byte(id)) == nil {
			return errTokenNotFound
		}
		return b.Delete([]byte(id))
	})
}

// Token implements Store.
func (s *Bolt) Token(ctx context.Context, id string) (auth.Token, error) {
	var out auth.Token
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = get(tx, bucketTokens, id, decodeToken)
		if errors.Is(err, store.ErrNotFound) {
			return errTokenNotFound
		}
		return err
	})
	return out, err
}

// Tokens implements Store.
func (s *Bolt) Tokens(ctx context.Context) ([]auth.Token, error) {
	return all(s.db, bucketTokens, decodeToken)
}

// Meta implements Store.
func (s *Bolt) Meta(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get([]byte(key))
		if v == nil {
			return errMetaNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

// PutMeta implements Store.
func (s *Bolt) PutMeta(ctx context.Context, key string, value []byte) error {
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte(key), value) })
}

// CreateMeta implements Store: the read and the write in one update
// transaction (bbolt's single writer), so racing callers agree.
func (s *Bolt) CreateMeta(ctx context.Context, key string, value []byte) ([]byte, error) {
	var out []byte
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if v := b.Get([]byte(key)); v != nil {
			out = bytes.Clone(v)
			return nil
		}
		out = bytes.Clone(value)
		if out == nil {
			out = []byte{}
		}
		return b.Put([]byte(key), out)
	})
	return out, err
}

// PutAction implements approval.ActionStore.
func (s *Bolt) PutAction(ctx context.Context, a *approval.Action) error {
	return s.update(func(tx *bolt.Tx) error { return putAction(tx, a) })
}

func putAction(tx *bolt.Tx, a *approval.Action) error {
	if err := put(tx, bucketActions, a.ID, a, encodeAction); err != nil {
		return err
	}
	if a.Status == approval.Pending {
		// The value is the action's creation time, so PendingSummary reads
		// no action (stores before it wrote none: those it decodes).
		at, err := a.CreatedAt.MarshalBinary()
		if err != nil {
			return err
		}
		return tx.Bucket(bucketPending).Put([]byte(a.ID), at)
	}
	return tx.Bucket(bucketPending).Delete([]byte(a.ID))
}

// PendingSummary implements Store: one read of the pending index, which
// holds each pending action's creation time.
func (s *Bolt) PendingSummary(ctx context.Context) (n int, oldest time.Time, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		actions := tx.Bucket(bucketActions)
		return tx.Bucket(bucketPending).ForEach(func(id, v []byte) error {
			var at time.Time
			if len(v) == 0 || at.UnmarshalBinary(v) != nil {
				a, err := decodeAction(actions.Get(id))
				if err != nil {
					return err
				}
				at = a.CreatedAt
			}
			if n == 0 || at.Before(oldest) {
				oldest = at
			}
			n++
			return nil
		})
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	return n, oldest, nil
}

// Action implements approval.ActionStore.
func (s *Bolt) Action(ctx context.Context, id string) (approval.Action, error) {
	var a approval.Action
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		a, err = get(tx, bucketActions, id, decodeAction)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return a, approval.ErrNotFound
	}
	return a, err
}

// Actions implements approval.ActionStore: newest first.
func (s *Bolt) Actions(ctx context.Context, status approval.Status, limit int) ([]approval.Action, error) {
	var out []approval.Action
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketActions)
		if status == approval.Pending {
			c := tx.Bucket(bucketPending).Cursor()
			for k, _ := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, _ = c.Prev() {
				a, err := decodeAction(b.Get(k))
				if err != nil {
					return err
				}
				out = append(out, a)
			}
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			a, err := decodeAction(v)
			if err != nil {
				return err
			}
			if status == "" || a.Status == status {
				out = append(out, a)
			}
		}
		return nil
	})
	return out, err
}

// UpdateAction implements approval.ActionStore: fn sees and changes the stored
// action inside one write transaction.
func (s *Bolt) UpdateAction(ctx context.Context, id string, fn func(*approval.Action) error) (approval.Action, error) {
	var a approval.Action
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		if a, err = get(tx, bucketActions, id, decodeAction); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return approval.ErrNotFound
			}
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		return putAction(tx, &a)
	})
	return a, err
}

// Ready implements Store.
func (s *Bolt) Ready(ctx context.Context) error {
	return s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketAudit) == nil {
			return errors.New("audit bucket missing")
		}
		return nil
	})
}

// Close applies what the journal holds, syncs and closes the files.
func (s *Bolt) Close() error {
	s.once.Do(func() {
		s.live.Lock() // wait for writes in progress; refuse later ones
		s.closed = true
		s.live.Unlock()
		s.wal.Stop() // the applier drains the journal into bbolt and stops
		errs := []error{s.db.Sync()}
		errs = append(errs, s.wal.Close(errs[0] == nil), s.db.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// CheckFile runs bbolt's consistency check on a database file that no
// process has open (after a crash, or for an operator's check).
func CheckFile(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
}
