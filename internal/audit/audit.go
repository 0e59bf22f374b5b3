// Package audit records everything that crosses the broker's boundary as a
// SHA-256 hash chain, written durably with group commit.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/grants"
)

// ErrUnavailable means a record could not be written durably; the action it
// describes must not happen (fail closed).
var ErrUnavailable = fault.Hidden(fault.AuditUnavailable, "audit log unavailable")

// Event types.
const (
	TypeSessionCreated = "session.created"
	TypeSessionRevoked = "session.revoked"
	TypeGrantCreated   = "grant.created"
	TypeGrantRevoked   = "grant.revoked"
	TypeCallAllowed    = "call.allowed"
	TypeCallDenied     = "call.denied"
	TypeCallCompleted  = "call.completed"
	// MCP calls (DESIGN §10): a tools/call's decision and completion, a
	// listing, a tool that changed, a request of the server's refused.
	TypeMCPCallAllowed          = "mcp.call.allowed"
	TypeMCPCallDenied           = "mcp.call.denied"
	TypeMCPCallCompleted        = "mcp.call.completed"
	TypeMCPList                 = "mcp.list"
	TypeMCPToolChanged          = "mcp.tool_changed"
	TypeMCPServerRequestBlocked = "mcp.server_request_blocked"
	TypeEgressDenied            = "egress.denied" // the proxy door refused a destination (its host:port in Path)
	TypeKillswitch              = "killswitch.engaged"
	TypeKillswitchOff           = "killswitch.released"
	TypeTokenCreated            = "token.created"
	TypeTokenRevoked            = "token.revoked"
	TypeBrokerStarted           = "broker.started"
	TypeCredentialFetch         = "credential.fetched"
	// A credential minted per session (upstream.Minter): the lease id only
	// as an HMAC, never a value.
	TypeCredentialMinted  = "credential.minted"
	TypeCredentialRenewed = "credential.renewed"
	TypeCredentialRevoked = "credential.revoked"
	TypeCredentialFailed  = "credential.failed" // a mint, renewal or revocation failed (Reason says which)
	TypeUILogin           = "ui.login"
	TypeUILogout          = "ui.logout"
)

// Actor is who caused an event.
type Actor struct {
	Kind string `json:"kind"` // sandbox, operator, reviewer, auditor, admin, system
	ID   string `json:"id,omitempty"`
}

// Event is one audit record. Its JSON encoding (field order as declared) is
// the stored and exported form, and what the hash covers: the hash is the
// SHA-256 of the record's encoding with Hash empty, and PrevHash links it to
// the record before. The format is documented in api/openapi.yaml (AuditEvent).
type Event struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	Actor     Actor     `json:"actor"`
	RequestID string    `json:"request_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	TaskID    string    `json:"task_id,omitempty"`
	GrantID   string    `json:"grant_id,omitempty"`
	ActionID  string    `json:"action_id,omitempty"`
	// TraceID and SpanID are the call's span (W3C trace context hex) when
	// it was traced; omitted otherwise, so older records encode, hash and
	// verify as they always did.
	TraceID   string `json:"trace_id,omitempty"`
	SpanID    string `json:"span_id,omitempty"`
	Upstream  string `json:"upstream,omitempty"`
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	Decision  string `json:"decision,omitempty"` // allow | deny
	Code      string `json:"code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Status    int    `json:"status,omitempty"`
	LatencyUS int64  `json:"latency_us,omitempty"`
	BytesIn   int64  `json:"bytes_in,omitempty"`
	BytesOut  int64  `json:"bytes_out,omitempty"`
	// MCP is what a record of an MCP call says beyond a call's (DESIGN
	// §10); nil for every other record, which encodes as it always did.
	MCP      *MCP   `json:"mcp,omitempty"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash,omitempty"`
}

// MCP is the MCP part of a record: the tool, what the grant constrained
// (each value as its RFC 8785 JSON text: no unconstrained argument is ever
// recorded), the arguments' digest as forwarded, and for a completion, a
// listing or a changed tool what became of it. Its fields are strings,
// numbers and string maps only, so a decoded record re-encodes to the very
// bytes that were hashed.
type MCP struct {
	Tool        string            `json:"tool,omitempty"`
	ArgsSHA256  string            `json:"args_sha256,omitempty"`
	Constrained map[string]string `json:"constrained,omitempty"`
	IsError     bool              `json:"is_error,omitempty"`
	Redactions  int               `json:"redactions,omitempty"`
	Shown       []string          `json:"shown,omitempty"`  // mcp.list: the tools shown
	Hidden      []string          `json:"hidden,omitempty"` // mcp.list: the tools hidden
	Digest      string            `json:"digest,omitempty"` // the tool's digest as served
	// Recorded is the digest first recorded for the tool (mcp.tool_changed).
	Recorded string `json:"recorded,omitempty"`
	// Request is the method of a server-to-client request the broker
	// blocked (mcp.server_request_blocked).
	Request string `json:"request,omitempty"`
}

// Entry is one sealed record handed to a Sink.
type Entry struct {
	Seq  uint64
	Data []byte
	// Side is the grant usage the sink persists in the same transaction as
	// the record, or nil.
	Side *grants.UsageUpdate
	// SessionID is the record's session_id ("" for none), for a sink that
	// indexes records by session without decoding them.
	SessionID string
}

// Sink stores the chain.
type Sink interface {
	// WriteAudit stores entries (consecutive sequence numbers, following
	// the last written) atomically: a failed write leaves none of them. They
	// are durable at once, or, when needSync is true, once a SyncAudit that
	// started after the write returned. The sink may keep the entries' Data
	// (never reused), not the slice (reused for the next batch).
	WriteAudit(ctx context.Context, entries []Entry) (needSync bool, err error)
	// SyncAudit makes every written entry durable. It may run while the next
	// entries are written. After it fails, the writer writes nothing more.
	SyncAudit(ctx context.Context) error
	// AuditHead returns the last sequence number and hash (0, "" when empty).
	AuditHead(ctx context.Context) (uint64, string, error)
	// ScanAudit calls fn with each stored record from sequence from on, in
	// order. data is valid only during the call.
	ScanAudit(ctx context.Context, from uint64, fn func(seq uint64, data []byte) error) error
	// PutCheckpoint stores a signed checkpoint; Checkpoints lists them by seq.
	PutCheckpoint(ctx context.Context, c Checkpoint) error
	Checkpoints(ctx context.Context) ([]Checkpoint, error)
	// PruneAudit deletes the records up to anchor.Seq and stores anchor (a
	// signed checkpoint of the last deleted record) in one transaction.
	PruneAudit(ctx context.Context, anchor Checkpoint) (deleted uint64, err error)
}

// Sequencer is a Sink that several writers share (broker replicas on one
// database): the sink, not a writer, holds the chain's head. A Writer over a
// Sequencer calls AppendAudit instead of WriteAudit, handing it the batch as
// seal, which seals the batch's records onto a given head (the sequence
// after seq, prev_hash head) and returns them. The sink calls seal inside
// the transaction that locks the head, stores what it returns, moves the
// head to the last entry, and commits: one chain, whichever writer appends.
type Sequencer interface {
	Sink
	// AppendAudit calls seal with the chain's head (0, "" when empty) and
	// stores the entries it returns (consecutive sequence numbers after
	// the head) atomically with their sides, as WriteAudit does; needSync
	// is as for WriteAudit. seal may be called again (a retried
	// transaction): only the entries of its last call are stored, and an
	// error of seal is returned with nothing stored.
	//
	// guards name the batch's guarded records (a call's "allowed" record,
	// written before the call is sent): inside the transaction, before
	// seal, the sink reads whether each one's session was killed, its
	// grant revoked or the kill-switch engaged, and keeps that state from
	// changing until the commit (a kill committed after the check waits
	// for the records); seal is told which are refused (refused[i] for
	// guards[i]) and leaves them out of the chain.
	AppendAudit(ctx context.Context, guards []Guard, seal func(seq uint64, head string, refused []bool) ([]Entry, error)) (needSync bool, err error)
}

// Guard names a guarded record of a batch: it may be written only while
// its session and grant are alive and the kill-switch released.
type Guard struct {
	SessionID string
	GrantID   string
}

// ErrKilled refuses a guarded record (Writer.AppendGuarded) whose session
// was killed, grant revoked, or the kill-switch engaged, by a change the
// shared sink had committed before the record: it is not in the chain,
// and the call it describes must not be sent.
var ErrKilled = errors.New("audit: the record's session, grant or the kill-switch was killed first")

// Verifier checks a chain record by record.
type Verifier struct {
	prev  string
	seq   uint64
	count uint64
}

// VerifyError gives the first sequence number where the chain breaks.
type VerifyError struct {
	Seq    uint64
	Reason string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("audit chain broken at seq %d: %s", e.Seq, e.Reason)
}

// Next checks the next record's encoding.
func (v *Verifier) Next(data []byte) error {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return &VerifyError{Seq: v.seq + 1, Reason: "record is not a valid event"}
	}
	if v.count > 0 && e.Seq != v.seq+1 {
		return &VerifyError{Seq: v.seq + 1, Reason: fmt.Sprintf("expected seq %d, found %d", v.seq+1, e.Seq)}
	}
	if v.count > 0 && e.PrevHash != v.prev {
		return &VerifyError{Seq: e.Seq, Reason: "prev_hash does not match the previous record"}
	}
	want := e.Hash
	if _, err := seal(&e); err != nil || e.Hash != want {
		return &VerifyError{Seq: e.Seq, Reason: "hash does not match the record"}
	}
	v.prev, v.seq = e.Hash, e.Seq
	v.count++
	return nil
}

// Count is the number of records verified so far.
func (v *Verifier) Count() uint64 { return v.count }

// Head is the last verified hash.
func (v *Verifier) Head() string { return v.prev }
