package audit

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Checkpoint is a signed statement of the chain head: record Seq has hash
// Hash. An export carries them so a verifier holding only the public key can
// tell the chain is the broker's and detect truncation before the last one.
type Checkpoint struct {
	Seq       uint64    `json:"seq"`
	Hash      string    `json:"hash"`
	Time      time.Time `json:"time"`
	Anchor    bool      `json:"anchor,omitempty"` // the records up to Seq were pruned
	Signature string    `json:"signature"`        // base64 Ed25519 over SignedBytes
}

// SignedBytes is the message a checkpoint's signature covers.
func (c Checkpoint) SignedBytes() []byte {
	anchor := "0"
	if c.Anchor {
		anchor = "1"
	}
	return []byte("airlock-checkpoint-v1\n" + strconv.FormatUint(c.Seq, 10) + "\n" + c.Hash + "\n" +
		c.Time.UTC().Format(time.RFC3339Nano) + "\n" + anchor + "\n")
}

// Sign fills in the signature.
func (c *Checkpoint) Sign(key ed25519.PrivateKey) {
	c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, c.SignedBytes()))
}

// Valid checks the signature.
func (c Checkpoint) Valid(pub ed25519.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	return err == nil && len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, c.SignedBytes(), sig)
}

// ParsePublicKey reads the base64 form served at /v1/audit/public-key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errors.New("not a base64 Ed25519 public key")
	}
	return ed25519.PublicKey(b), nil
}

// Report is the outcome of verifying a chain with its checkpoints.
type Report struct {
	OK                 bool   `json:"ok"`
	Records            uint64 `json:"records"`
	FirstSeq           uint64 `json:"first_seq,omitempty"`
	LastSeq            uint64 `json:"last_seq,omitempty"`
	Head               string `json:"head,omitempty"`
	Checkpoints        int    `json:"checkpoints"`
	LastCheckpoint     uint64 `json:"last_checkpoint,omitempty"`
	UnsignedAfter      uint64 `json:"unsigned_records,omitempty"` // records after the last checkpoint
	BrokenAt           uint64 `json:"broken_at,omitempty"`
	Reason             string `json:"reason,omitempty"`
	CheckpointsChecked bool   `json:"checkpoints_checked"`
}

// ChainVerifier verifies records in order against checkpoints (sorted by
// seq). With a public key, every checkpoint's signature is checked and each
// must match the record it names; records may start after a pruning anchor.
type ChainVerifier struct {
	pub    ed25519.PublicKey
	cps    []Checkpoint
	next   int // next checkpoint to match
	v      Verifier
	first  uint64
	report Report
	failed bool
}

// NewChainVerifier prepares a verification. pub may be nil (chain only).
func NewChainVerifier(pub ed25519.PublicKey, cps []Checkpoint) (*ChainVerifier, error) {
	cv := &ChainVerifier{pub: pub, cps: cps}
	cv.report.Checkpoints = len(cps)
	cv.report.CheckpointsChecked = pub != nil
	for i, c := range cps {
		if i > 0 && c.Seq <= cps[i-1].Seq {
			return nil, errors.New("checkpoints are not in sequence order")
		}
		if pub != nil && !c.Valid(pub) {
			cv.fail(c.Seq, "checkpoint signature does not verify")
			return cv, nil
		}
	}
	return cv, nil
}

func (cv *ChainVerifier) fail(seq uint64, reason string) {
	if !cv.failed {
		cv.failed = true
		cv.report.BrokenAt, cv.report.Reason = seq, reason
	}
}

// Next checks one record (its stored JSON encoding).
func (cv *ChainVerifier) Next(data []byte) error {
	if cv.failed {
		return errStop
	}
	if cv.v.count == 0 {
		var head struct {
			Seq      uint64 `json:"seq"`
			PrevHash string `json:"prev_hash"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			cv.fail(1, "record is not a valid event")
			return errStop
		}
		cv.first = head.Seq
		if head.Seq > 1 {
			// Records were pruned: the first one must continue a signed anchor.
			var anchor *Checkpoint
			for i := range cv.cps {
				if cv.cps[i].Seq == head.Seq-1 {
					anchor = &cv.cps[i]
				}
			}
			if anchor == nil || anchor.Hash != head.PrevHash {
				cv.fail(head.Seq, fmt.Sprintf("chain starts at seq %d without a matching anchoring checkpoint", head.Seq))
				return errStop
			}
			cv.v = Verifier{prev: anchor.Hash, seq: anchor.Seq, count: 1}
			for cv.next < len(cv.cps) && cv.cps[cv.next].Seq <= anchor.Seq {
				cv.next++
			}
		}
	}
	if err := cv.v.Next(data); err != nil {
		var ve *VerifyError
		if errors.As(err, &ve) {
			cv.fail(ve.Seq, ve.Reason)
		} else {
			cv.fail(cv.v.seq+1, err.Error())
		}
		return errStop
	}
	cv.report.Records++
	for cv.next < len(cv.cps) && cv.cps[cv.next].Seq == cv.v.seq {
		if cv.cps[cv.next].Hash != cv.v.prev {
			cv.fail(cv.v.seq, "record does not match its signed checkpoint")
			return errStop
		}
		cv.report.LastCheckpoint = cv.v.seq
		cv.next++
	}
	if cv.next < len(cv.cps) && cv.cps[cv.next].Seq < cv.v.seq {
		cv.fail(cv.cps[cv.next].Seq, "a checkpointed record is missing")
		return errStop
	}
	return nil
}

var errStop = errors.New("verification stopped")

// IsStop reports whether err is the verifier's own stop signal.
func IsStop(err error) bool { return errors.Is(err, errStop) }

// Finish returns the report once every record was given.
func (cv *ChainVerifier) Finish() Report {
	r := cv.report
	r.FirstSeq, r.LastSeq, r.Head = cv.first, cv.v.seq, cv.v.prev
	if !cv.failed && cv.next < len(cv.cps) {
		// A signed checkpoint names a record the export does not have: truncated.
		cv.fail(cv.cps[cv.next].Seq, "the log ends before a signed checkpoint (records were removed)")
		r.BrokenAt, r.Reason = cv.report.BrokenAt, cv.report.Reason
	}
	r.OK = !cv.failed
	if r.LastSeq > r.LastCheckpoint {
		r.UnsignedAfter = r.LastSeq - r.LastCheckpoint
	}
	return r
}
