package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-broker/airlock/internal/audit"
)

// journal is the audit log's write-ahead file. A commit is one write(2) of
// the batch instead of a bbolt transaction; in fsync mode one fdatasync,
// running while the next batch is written, makes every batch written before
// it durable. An applier moves records into bbolt in large batches off the
// callers' path, and the journal is replayed into bbolt on open, so a record
// acknowledged to a caller survives a crash either way.
//
// Entry: u32 payload length | u32 CRC-32C of payload | payload, where
// payload = u64 seq | u32 len(data) | data | the side as the SideCodec encodes
// it (or nothing).
//
// The current file is sealed (renamed to <path>.<last seq>) once it passes
// its size limit, so it never grows without bound under steady load; a
// sealed segment is deleted once bbolt durably holds its last record.
//
// The file is written out with zeros ahead of the entries, by a goroutine
// of its own (preallocate), off the callers' path.
type journal struct {
	syncMu sync.Mutex // held by sync and rotation, so a sync never meets a closed file
	mu     sync.Mutex // guards the rest; a write never waits for a sync
	// appendMu is held by an append throughout (it owns buf, and may wait
	// for zeros with mu released).
	appendMu sync.Mutex
	path     string
	limit    int64
	f        *os.File
	size     int64 // bytes of entries in the current file
	// allocated is how far the current file is written out: zeros past the
	// entries, written and fsync'd ahead by preallocate, or the entries
	// themselves when they outran it. Entries overwrite zeros instead of
	// growing the file, so a sync has no file size to commit and is an
	// fdatasync (on ext4 25–35% faster and cheaper in CPU than one that
	// grows the file). Replay stops at the zeros.
	allocated int64
	// grown: an append grew the file past what was written out (the
	// preallocator fell behind) since the last sync began, so the next
	// sync is a full fsync rather than an fdatasync.
	grown bool
	// zeroing: preallocate is writing zeros past allocated (in f); an
	// append that would reach past allocated waits for it (zeroed).
	zeroing bool
	zeroed  *sync.Cond // on mu: zeroing ended
	noZeros bool       // writing zeros failed for this file: appends grow it
	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	log     *slog.Logger

	lastSeq uint64
	buf     []byte
	sealed  []segment
	codec   SideCodec
}

type segment struct {
	path    string
	lastSeq uint64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func openJournal(path string, limit int64, codec SideCodec, log *slog.Logger) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit journal: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j := &journal{path: path, limit: limit, f: f, codec: codec, log: log,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	j.zeroed = sync.NewCond(&j.mu)
	go j.preallocate()
	matches, _ := filepath.Glob(path + ".*")
	sort.Strings(matches) // zero-padded sequence numbers sort in order
	for _, m := range matches {
		seq, err := strconv.ParseUint(strings.TrimPrefix(m, path+"."), 10, 64)
		if err == nil {
			j.sealed = append(j.sealed, segment{path: m, lastSeq: seq})
		}
	}
	return j, nil
}

// replay reads every intact entry, sealed segments first; a torn tail of
// the current file (never acknowledged in fsync mode) ends it and is cut off.
func (j *journal) replay(fn func(e audit.Entry) error) error {
	for _, sg := range j.sealed {
		f, err := os.Open(sg.path)
		if err != nil {
			return err
		}
		_, err = j.readEntries(f, fn)
		f.Close()
		if err != nil {
			return err
		}
	}
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	off, err := j.readEntries(j.f, func(e audit.Entry) error {
		j.lastSeq = e.Seq
		return fn(e)
	})
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.waitZeros()
	if err := j.f.Truncate(off); err != nil { // the zeros, or a torn tail
		return err
	}
	j.size, j.allocated = off, off
	_, err = j.f.Seek(off, io.SeekStart)
	return err
}

// readEntries calls fn for each intact entry and returns the offset after
// the last one.
func (j *journal) readEntries(rd io.Reader, fn func(e audit.Entry) error) (int64, error) {
	r := bufio.NewReaderSize(rd, 1<<20)
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n < 12 || n > 64<<20 {
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			break
		}
		if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(hdr[4:]) {
			break
		}
		e, err := j.decodeEntry(payload)
		if err != nil {
			break
		}
		if err := fn(e); err != nil {
			return off, err
		}
		off += 8 + int64(n)
	}
	return off, nil
}

func (j *journal) decodeEntry(p []byte) (audit.Entry, error) {
	seq := binary.BigEndian.Uint64(p[:8])
	dl := binary.BigEndian.Uint32(p[8:12])
	if int(dl) > len(p)-12 {
		return audit.Entry{}, errors.New("bad entry")
	}
	e := audit.Entry{Seq: seq, Data: p[12 : 12+dl]}
	if rest := p[12+dl:]; len(rest) > 0 {
		if j.codec.Decode == nil {
			return e, errors.New("entry has a side and no decoder")
		}
		side, err := j.codec.Decode(rest)
		if err != nil {
			return e, err
		}
		e.Side = side
	}
	return e, nil
}

// append writes entries with one write(2). They are durable after the
// next sync (which may run concurrently with later appends).
func (j *journal) append(entries []audit.Entry) error {
	j.appendMu.Lock() // one append at a time, even while one waits for zeros
	defer j.appendMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	b := j.buf[:0]
	for _, e := range entries {
		var side []byte
		if e.Side != nil && j.codec.Encode != nil {
			var err error
			if side, err = j.codec.Encode(e.Side); err != nil {
				return err
			}
		}
		n := 12 + len(e.Data) + len(side)
		start := len(b)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
		b = append(b, e.Data...)
		b = append(b, side...)
		binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+8:], castagnoli))
	}
	j.buf = b
	for j.zeroing && j.size+int64(len(b)) > j.allocated {
		j.zeroed.Wait() // never write where zeros are being written
	}
	end := j.size + int64(len(b))
	if _, err := j.f.Write(b); err != nil {
		// A partial write leaves a torn tail that replay cuts off; re-align.
		_ = j.f.Truncate(j.size)
		_, _ = j.f.Seek(j.size, io.SeekStart)
		j.allocated = j.size
		return fmt.Errorf("audit journal write: %w", err)
	}
	j.size = end
	if end > j.allocated {
		j.allocated, j.grown = end, true
	}
	if len(entries) > 0 {
		j.lastSeq = entries[len(entries)-1].Seq
	}
	j.ahead()
	return nil
}

// The preallocator keeps between allocAhead-allocChunk and allocAhead bytes
// of zeros written out past the entries, a chunk at a time.
const (
	allocChunk = 1 << 20
	allocAhead = 2 * allocChunk
)

// zeros is what a chunk is written from.
var zeros [64 << 10]byte

// ahead wakes the preallocator when fewer than allocAhead-allocChunk bytes
// are written out past the entries. j.mu is held.
func (j *journal) ahead() {
	if j.zeroing || j.noZeros || j.allocated-j.size >= allocAhead-allocChunk {
		return
	}
	j.zeroing = true
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// waitZeros waits until no zeros are being written. j.mu is held.
func (j *journal) waitZeros() {
	for j.zeroing {
		j.zeroed.Wait()
	}
}

// preallocate writes zeros past the entries of the current file, a chunk at
// a time, and fsyncs each chunk (the file's size changes), until allocAhead
// bytes are written out ahead; ahead wakes it. Appends meanwhile write below
// allocated, or wait (zeroing). A failure is logged: appends then grow the
// file, and their syncs are fsyncs.
func (j *journal) preallocate() {
	defer close(j.stopped)
	for {
		select {
		case <-j.stop:
			j.mu.Lock()
			j.zeroing = false
			j.zeroed.Broadcast()
			j.mu.Unlock()
			return
		case <-j.wake:
		}
		for j.zeroChunk() {
		}
	}
}

// zeroChunk writes one chunk of zeros if one is wanted, and says whether
// another may be.
func (j *journal) zeroChunk() bool {
	j.mu.Lock()
	f, from := j.f, j.allocated
	if !j.zeroing || from-j.size >= allocAhead {
		j.zeroing = false
		j.zeroed.Broadcast()
		j.mu.Unlock()
		return false
	}
	j.mu.Unlock()
	var err error
	for off := int64(0); off < allocChunk && err == nil; off += int64(len(zeros)) {
		_, err = f.WriteAt(zeros[:], from+off)
	}
	if err == nil {
		err = f.Sync()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		// Zeros past allocated, whole or not, are harmless: entries
		// overwrite them and replay stops at them.
		j.log.Error("audit journal: writing zeros ahead failed (appends grow this file)", "err", err)
		j.zeroing, j.noZeros = false, j.f == f
		j.zeroed.Broadcast()
		return false
	}
	if j.f == f && j.allocated == from { // still the file and place it was asked for
		j.allocated = from + allocChunk
	}
	j.zeroed.Broadcast()
	return true
}

// rotateIfFull seals the current file once it passes the size limit.
func (j *journal) rotateIfFull() error {
	j.mu.Lock()
	full := j.limit > 0 && j.size >= j.limit
	j.mu.Unlock()
	if !full { // the common case: no wait for a sync in progress
		return nil
	}
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.limit > 0 && j.size >= j.limit {
		return j.seal()
	}
	return nil
}

// seal renames the full current file to a segment and starts a new one.
// On failure nothing has changed and writes go on to the current file.
// Callers hold syncMu and mu.
func (j *journal) seal() error {
	j.waitZeros()
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("audit journal sync: %w", err)
	}
	name := fmt.Sprintf("%s.%020d", j.path, j.lastSeq)
	if err := os.Rename(j.path, name); err != nil {
		return fmt.Errorf("seal the audit journal: %w", err)
	}
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		_ = os.Rename(name, j.path)
		return fmt.Errorf("open audit journal: %w", err)
	}
	_ = j.f.Close() // synced above: nothing is lost if closing fails
	j.f, j.size, j.allocated, j.grown, j.noZeros = f, 0, 0, false, false
	j.sealed = append(j.sealed, segment{path: name, lastSeq: j.lastSeq})
	j.ahead()
	return nil
}

// sync makes every appended entry durable. Appends may run meanwhile: they
// wait for the next sync. Entries written into zeros written out (and
// fsync'd) ahead change no file size: fdatasync makes them durable, as
// fsync would, without committing the file's times. When an append grew
// the file since the last sync began, it is a full fsync.
func (j *journal) sync() error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	f, grown := j.f, j.grown
	j.grown = false
	j.mu.Unlock()
	var err error
	if grown {
		err = f.Sync()
	} else {
		err = datasync(f)
	}
	if err != nil {
		j.mu.Lock()
		j.grown = j.grown || grown // the next sync commits the size, whatever else failed
		j.mu.Unlock()
	}
	return err
}

// truncateIfApplied deletes the sealed segments whose records are all
// durable in bbolt (applied through seq and synced), and empties the current
// file when it is applied too and has grown past limit.
func (j *journal) truncateIfApplied(seq uint64, limit int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for len(j.sealed) > 0 && j.sealed[0].lastSeq <= seq {
		if err := os.Remove(j.sealed[0].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		j.sealed = j.sealed[1:]
	}
	if j.size < limit || seq < j.lastSeq {
		return nil
	}
	j.waitZeros()
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	j.size, j.allocated, j.noZeros = 0, 0, false
	_, err := j.f.Seek(0, io.SeekStart)
	return err
}

// prepare starts writing zeros out ahead of the entries (after the replay
// and its truncation, so none are written only to be cut off).
func (j *journal) prepare() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ahead()
}

// close stops the preallocator and closes the file.
func (j *journal) close() error {
	close(j.stop)
	<-j.stopped
	return j.f.Close()
}
