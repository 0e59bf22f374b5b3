package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The session index: bucket audit_by_session holds one empty value per audit
// record that names a session, keyed
//
//	u16 len(session id) | session id | u64 seq   (big-endian)
//
// so a session's records are one key range in sequence order. An entry is
// written in the same transaction as its record (applyEntries) and deleted
// with it (PruneAudit). A log written before the index existed is indexed
// when the store opens (buildSessionIndex, resumable), before anything else
// reads or writes it: readers never see a partial index.
var bucketAuditSessions = []byte("audit_by_session")

// indexState, in the index bucket, records how far the index is built:
// "done", or the 8-byte seq a build in progress reached. It is not an index
// key: those hold a session id of at least one byte.
var indexState = []byte("\x00\x00state")

// maxIndexedSessionID: records naming a longer session id are not indexed
// (the broker's ids are 32 bytes); reading such a session scans the log.
const maxIndexedSessionID = 1024

// sessionKeyPrefix is the index range of a session.
func sessionKeyPrefix(sessionID string) []byte {
	k := make([]byte, 0, 2+len(sessionID)+8)
	k = binary.BigEndian.AppendUint16(k, uint16(len(sessionID)))
	return append(k, sessionID...)
}

func indexable(sessionID string) bool {
	return sessionID != "" && len(sessionID) <= maxIndexedSessionID
}

// indexRecord adds a record to the session index. ix is the index bucket.
func indexRecord(ix *bolt.Bucket, seq uint64, data []byte) error {
	sid, ok := recordSessionID(data)
	if !ok || !indexable(sid) {
		return nil
	}
	return ix.Put(binary.BigEndian.AppendUint64(sessionKeyPrefix(sid), seq), nil)
}

// unindexRecord removes a record's index entry (the record is deleted).
func unindexRecord(ix *bolt.Bucket, seq uint64, data []byte) error {
	sid, ok := recordSessionID(data)
	if !ok || !indexable(sid) {
		return nil
	}
	return ix.Delete(binary.BigEndian.AppendUint64(sessionKeyPrefix(sid), seq))
}

var sessionField = []byte(`,"session_id":"`)

// recordSessionID reads the session_id of a stored audit record without
// decoding the rest. The record is audit's encoding: compact JSON in a fixed
// field order, where a quote inside a string is always escaped, so the first
// `,"session_id":"` is the top-level field (actor, the one nested object,
// has none). ok is false when the record names no session.
func recordSessionID(data []byte) (string, bool) {
	i := bytes.Index(data, sessionField)
	if i < 0 {
		return "", false
	}
	v := data[i+len(sessionField):]
	end := bytes.IndexByte(v, '"')
	if end < 0 {
		return "", false
	}
	if bytes.IndexByte(v[:end], '\\') < 0 {
		return string(v[:end]), true
	}
	// Escapes: find the closing quote (one not escaped) and let
	// encoding/json decode the string.
	for end = 0; end < len(v); end++ {
		if v[end] == '\\' {
			end++
			continue
		}
		if v[end] == '"' {
			break
		}
	}
	if end >= len(v) {
		return "", false
	}
	var sid string
	if err := json.Unmarshal(data[i+len(sessionField)-1:i+len(sessionField)+end+1], &sid); err != nil {
		return "", false
	}
	return sid, true
}

// buildSessionIndex indexes the records of a log written before the index
// existed, in chunks of one transaction each; an interrupted build resumes
// where it stopped. It runs in OpenBolt before the journal is replayed (the
// replay indexes what it applies).
func buildSessionIndex(db *bolt.DB) error {
	const chunk = 10000
	for {
		done := false
		err := db.Update(func(tx *bolt.Tx) error {
			ix := tx.Bucket(bucketAuditSessions)
			state := ix.Get(indexState)
			if string(state) == "done" {
				done = true
				return nil
			}
			var next uint64
			if len(state) == 8 {
				next = binary.BigEndian.Uint64(state) + 1
			}
			c := tx.Bucket(bucketAudit).Cursor()
			n := 0
			var last uint64
			for k, v := c.Seek(seqKey(next)); k != nil; k, v = c.Next() {
				if n == chunk {
					return ix.Put(indexState, seqKey(last))
				}
				last = binary.BigEndian.Uint64(k)
				if err := indexRecord(ix, last, v); err != nil {
					return err
				}
				n++
			}
			done = true
			return ix.Put(indexState, []byte("done"))
		})
		if err != nil {
			return fmt.Errorf("index the audit log by session: %w", err)
		}
		if err := db.Sync(); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// ScanSessionAudit calls fn with each stored record of the session (its
// session_id is sessionID) from sequence from on, in order, reading the
// session index rather than the whole log. Like ScanAudit, it reads in
// chunks of short read transactions, and data is valid only during the call.
func (s *Bolt) ScanSessionAudit(ctx context.Context, sessionID string, from uint64, fn func(seq uint64, data []byte) error) error {
	if sessionID == "" {
		return nil
	}
	if !indexable(sessionID) {
		return s.ScanAudit(ctx, from, func(seq uint64, data []byte) error {
			if sid, ok := recordSessionID(data); ok && sid == sessionID {
				return fn(seq, data)
			}
			return nil
		})
	}
	if err := s.flushAudit(); err != nil {
		return err
	}
	const chunk = 1024
	prefix := sessionKeyPrefix(sessionID)
	next := from
	buf := make([][]byte, 0, chunk)
	seqs := make([]uint64, 0, chunk)
	for {
		buf, seqs = buf[:0], seqs[:0]
		err := s.db.View(func(tx *bolt.Tx) error {
			log := tx.Bucket(bucketAudit)
			c := tx.Bucket(bucketAuditSessions).Cursor()
			start := binary.BigEndian.AppendUint64(bytes.Clone(prefix), next)
			for k, _ := c.Seek(start); k != nil && len(buf) < chunk && len(k) == len(prefix)+8 && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				seq := binary.BigEndian.Uint64(k[len(prefix):])
				v := log.Get(k[len(prefix):])
				if v == nil {
					continue
				}
				seqs = append(seqs, seq)
				buf = append(buf, bytes.Clone(v))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i := range buf {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(seqs[i], buf[i]); err != nil {
				return err
			}
		}
		if len(buf) < chunk {
			return nil
		}
		next = seqs[len(seqs)-1] + 1
	}
}

// LastSessionAudit calls fn with the session's last records, newest first,
// at most limit of them, reading the session index (one short read
// transaction). data is valid only during the call.
func (s *Bolt) LastSessionAudit(ctx context.Context, sessionID string, limit int, fn func(seq uint64, data []byte) error) error {
	if sessionID == "" || limit <= 0 {
		return nil
	}
	var (
		seqs []uint64
		buf  [][]byte
	)
	if !indexable(sessionID) {
		// A ring of the last limit records, from a scan of the log.
		err := s.ScanAudit(ctx, 0, func(seq uint64, data []byte) error {
			if sid, ok := recordSessionID(data); !ok || sid != sessionID {
				return nil
			}
			if len(seqs) == limit {
				seqs, buf = seqs[1:], buf[1:]
			}
			seqs, buf = append(seqs, seq), append(buf, bytes.Clone(data))
			return nil
		})
		if err != nil {
			return err
		}
		for i := len(seqs) - 1; i >= 0; i-- {
			if err := fn(seqs[i], buf[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.flushAudit(); err != nil {
		return err
	}
	prefix := sessionKeyPrefix(sessionID)
	err := s.db.View(func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		c := tx.Bucket(bucketAuditSessions).Cursor()
		// The session's range ends before prefix|MaxUint64+1: seek past it
		// and step back.
		end := binary.BigEndian.AppendUint64(bytes.Clone(prefix), ^uint64(0))
		k, _ := c.Seek(end)
		if k == nil {
			k, _ = c.Last()
		} else if !bytes.Equal(k, end) {
			k, _ = c.Prev()
		}
		for ; k != nil && len(buf) < limit && len(k) == len(prefix)+8 && bytes.HasPrefix(k, prefix); k, _ = c.Prev() {
			v := log.Get(k[len(prefix):])
			if v == nil {
				continue
			}
			seqs = append(seqs, binary.BigEndian.Uint64(k[len(prefix):]))
			buf = append(buf, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
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
