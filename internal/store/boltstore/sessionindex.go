package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The session index: bucket audit_by_session holds, per session, its audit
// records' sequence numbers in blocks of up to indexBlock, each under
//
//	u16 len(session id) | session id | u64 first seq in the block   (big-endian)
//
// with the value the block's seqs (u64 big-endian each, ascending). A
// session's records are one key range in sequence order, and an applied
// batch costs one Put per session it names, not one per record. Entries are
// written in the same transaction as their records (applyEntries) and
// removed with them (PruneAudit). A log written before the index existed is
// indexed when the store opens (buildSessionIndex, resumable), before
// anything else reads or writes it: readers never see a partial index.
var bucketAuditSessions = []byte("audit_by_session")

// indexBlock is the most seqs one index value holds (1 KiB).
const indexBlock = 128

// indexState, in the index bucket, records how far the index is built:
// "done", or the 8-byte seq a build in progress reached. It is not a block
// key: those hold a session id of at least one byte.
var indexState = []byte("\x00\x00state")

// maxIndexedSessionID: records naming a longer session id are not indexed
// (the broker's ids are 32 bytes); reading such a session scans the log.
const maxIndexedSessionID = 1024

// sessionKeyPrefix is the index range of a session.
func sessionKeyPrefix(sessionID []byte) []byte {
	k := make([]byte, 0, 2+len(sessionID)+8)
	k = binary.BigEndian.AppendUint16(k, uint16(len(sessionID)))
	return append(k, sessionID...)
}

func indexable(sessionID string) bool {
	return sessionID != "" && len(sessionID) <= maxIndexedSessionID
}

// inRange reports whether k is a block key of the session with prefix.
func inRange(k, prefix []byte) bool {
	return len(k) == len(prefix)+8 && bytes.HasPrefix(k, prefix)
}

// indexBatch gathers the records of one transaction by session.
type indexBatch struct {
	at   map[string]int // session id → its seqs' index
	sids []string
	seqs [][]uint64
}

// add notes a record (in increasing seq order) if it names a session.
func (ib *indexBatch) add(seq uint64, data []byte) {
	sid, ok := recordSessionIDBytes(data)
	if !ok || len(sid) == 0 || len(sid) > maxIndexedSessionID {
		return
	}
	if i, ok := ib.at[string(sid)]; ok { // no allocation for the lookup
		ib.seqs[i] = append(ib.seqs[i], seq)
		return
	}
	if ib.at == nil {
		ib.at = map[string]int{}
	}
	ib.at[string(sid)] = len(ib.seqs)
	ib.sids = append(ib.sids, string(sid))
	ib.seqs = append(ib.seqs, append(make([]uint64, 0, 16), seq))
}

// write appends the gathered seqs to their sessions' blocks: the last block
// is filled up, then new ones follow. Seqs are above every seq indexed.
func (ib *indexBatch) write(ix *bolt.Bucket) error {
	c := ix.Cursor()
	for i, sid := range ib.sids {
		seqs := ib.seqs[i]
		prefix := sessionKeyPrefix([]byte(sid))
		if k, v := lastBlock(c, prefix); k != nil && len(v) < 8*indexBlock {
			n := min(indexBlock-len(v)/8, len(seqs))
			nv := make([]byte, len(v), len(v)+8*n)
			copy(nv, v)
			if err := ix.Put(k, appendSeqs(nv, seqs[:n])); err != nil {
				return err
			}
			seqs = seqs[n:]
		}
		for len(seqs) > 0 {
			n := min(indexBlock, len(seqs))
			key := binary.BigEndian.AppendUint64(prefix, seqs[0])
			if err := ix.Put(key, appendSeqs(make([]byte, 0, 8*n), seqs[:n])); err != nil {
				return err
			}
			seqs = seqs[n:]
		}
	}
	return nil
}

func appendSeqs(b []byte, seqs []uint64) []byte {
	for _, s := range seqs {
		b = binary.BigEndian.AppendUint64(b, s)
	}
	return b
}

// lastBlock is the session's last block, or nil.
func lastBlock(c *bolt.Cursor, prefix []byte) (k, v []byte) {
	end := binary.BigEndian.AppendUint64(prefix, ^uint64(0))
	k, v = c.Seek(end)
	if k == nil {
		k, v = c.Last()
	} else if !bytes.Equal(k, end) {
		k, v = c.Prev()
	}
	if k == nil || !inRange(k, prefix) {
		return nil, nil
	}
	return k, v
}

// pruneIndex removes seqs up to through from the blocks of the sessions
// named: the records up to through are deleted, oldest first, so they are
// the first seqs of each session's range.
func pruneIndex(ix *bolt.Bucket, sessions map[string]struct{}, through uint64) error {
	for sid := range sessions {
		prefix := sessionKeyPrefix([]byte(sid))
		var drop [][]byte
		var keep []byte // the first block's remaining seqs, rewritten
		c := ix.Cursor()
		for k, v := c.Seek(prefix); k != nil && inRange(k, prefix); k, v = c.Next() {
			if binary.BigEndian.Uint64(v[len(v)-8:]) <= through {
				drop = append(drop, bytes.Clone(k))
				continue
			}
			if binary.BigEndian.Uint64(k[len(prefix):]) <= through {
				drop = append(drop, bytes.Clone(k))
				for i := 0; i < len(v); i += 8 {
					if binary.BigEndian.Uint64(v[i:]) > through {
						keep = bytes.Clone(v[i:])
						break
					}
				}
			}
			break
		}
		for _, k := range drop {
			if err := ix.Delete(k); err != nil {
				return err
			}
		}
		if keep != nil {
			if err := ix.Put(binary.BigEndian.AppendUint64(prefix, binary.BigEndian.Uint64(keep)), keep); err != nil {
				return err
			}
		}
	}
	return nil
}

var sessionField = []byte(`,"session_id":"`)

// recordSessionID reads the session_id of a stored audit record without
// decoding the rest. The record is audit's encoding: compact JSON in a fixed
// field order, where a quote inside a string is always escaped, so the first
// `,"session_id":"` is the top-level field (actor, the one nested object,
// has none). ok is false when the record names no session.
func recordSessionID(data []byte) (string, bool) {
	sid, ok := recordSessionIDBytes(data)
	return string(sid), ok
}

// recordSessionIDBytes is recordSessionID without a copy when the id has no
// escapes (the result then aliases data).
func recordSessionIDBytes(data []byte) ([]byte, bool) {
	i := bytes.Index(data, sessionField)
	if i < 0 {
		return nil, false
	}
	v := data[i+len(sessionField):]
	end := bytes.IndexByte(v, '"')
	if end < 0 {
		return nil, false
	}
	if bytes.IndexByte(v[:end], '\\') < 0 {
		return v[:end], true
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
		return nil, false
	}
	var sid string
	if err := json.Unmarshal(data[i+len(sessionField)-1:i+len(sessionField)+end+1], &sid); err != nil {
		return nil, false
	}
	return []byte(sid), true
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
			var batch indexBatch
			n := 0
			var last uint64
			for k, v := c.Seek(seqKey(next)); k != nil; k, v = c.Next() {
				if n == chunk {
					if err := batch.write(ix); err != nil {
						return err
					}
					return ix.Put(indexState, seqKey(last))
				}
				last = binary.BigEndian.Uint64(k)
				batch.add(last, v)
				n++
			}
			if err := batch.write(ix); err != nil {
				return err
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
	prefix := sessionKeyPrefix([]byte(sessionID))
	return s.scanChunks(ctx, from, func(tx *bolt.Tx, next uint64, seqs []uint64, buf [][]byte) ([]uint64, [][]byte) {
		log := tx.Bucket(bucketAudit)
		c := tx.Bucket(bucketAuditSessions).Cursor()
		// The block holding next starts at or before it.
		start := binary.BigEndian.AppendUint64(bytes.Clone(prefix), next)
		k, v := c.Seek(start)
		if k == nil || !bytes.Equal(k, start) {
			var pk, pv []byte
			if k == nil {
				pk, pv = c.Last()
			} else {
				pk, pv = c.Prev()
			}
			if pk != nil && inRange(pk, prefix) {
				k, v = pk, pv
			} else {
				k, v = c.Seek(start)
			}
		}
		for ; k != nil && inRange(k, prefix) && len(buf) < scanChunk; k, v = c.Next() {
			for i := 0; i < len(v) && len(buf) < scanChunk; i += 8 {
				seq := binary.BigEndian.Uint64(v[i:])
				if seq < next {
					continue
				}
				if data := log.Get(seqKey(seq)); data != nil {
					seqs = append(seqs, seq)
					buf = append(buf, bytes.Clone(data))
				}
			}
		}
		return seqs, buf
	}, fn)
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
	prefix := sessionKeyPrefix([]byte(sessionID))
	err := s.db.View(func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		c := tx.Bucket(bucketAuditSessions).Cursor()
		for k, v := lastBlock(c, prefix); k != nil && inRange(k, prefix) && len(buf) < limit; k, v = c.Prev() {
			for i := len(v) - 8; i >= 0 && len(buf) < limit; i -= 8 {
				seq := binary.BigEndian.Uint64(v[i:])
				if data := log.Get(seqKey(seq)); data != nil {
					seqs = append(seqs, seq)
					buf = append(buf, bytes.Clone(data))
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return deliver(ctx, seqs, buf, fn)
}
