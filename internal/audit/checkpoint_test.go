package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"testing"
	"time"
)

// chain builds n sealed records and checkpoints at the given seqs.
func chain(t *testing.T, n int, key ed25519.PrivateKey, at ...uint64) ([][]byte, []Checkpoint) {
	t.Helper()
	var recs [][]byte
	var cps []Checkpoint
	prev := ""
	for i := 1; i <= n; i++ {
		e := Event{Seq: uint64(i), Time: time.Unix(int64(i), 0).UTC(), Type: TypeCallAllowed, Reason: fmt.Sprint("r", i), PrevHash: prev}
		data, err := seal(&e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, data)
		prev = e.Hash
		for _, s := range at {
			if s == uint64(i) {
				c := Checkpoint{Seq: e.Seq, Hash: e.Hash, Time: e.Time}
				c.Sign(key)
				cps = append(cps, c)
			}
		}
	}
	return recs, cps
}

func verify(t *testing.T, pub ed25519.PublicKey, cps []Checkpoint, recs [][]byte) Report {
	t.Helper()
	cv, err := NewChainVerifier(pub, cps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if cv.Next(r) != nil {
			break
		}
	}
	return cv.Finish()
}

func TestChainVerifierCatchesTampering(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	_ = otherPub
	recs, cps := chain(t, 10, key, 4, 8)
	clone := func() [][]byte { return append([][]byte(nil), recs...) }

	if r := verify(t, pub, cps, recs); !r.OK || r.Records != 10 || r.LastCheckpoint != 8 || r.UnsignedAfter != 2 {
		t.Fatalf("intact chain: %+v", r)
	}
	forged := append([]Checkpoint(nil), cps...)
	forged[1].Sign(otherKey)
	edited := clone()
	edited[5] = bytes.Replace(edited[5], []byte(`"r6"`), []byte(`"r7"`), 1)
	// A record re-sealed after an edit passes its own hash but breaks the link.
	resealed := clone()
	e := Event{Seq: 6, Time: time.Unix(6, 0).UTC(), Type: TypeCallAllowed, Reason: "forged", PrevHash: "wrong"}
	resealed[5], _ = seal(&e)
	tests := []struct {
		name     string
		cps      []Checkpoint
		recs     [][]byte
		brokenAt uint64
	}{
		{"modified record", cps, edited, 6},
		{"re-sealed record", cps, resealed, 6},
		{"deleted record", cps, append(clone()[:5], recs[6:]...), 6},
		{"inserted record", cps, append(append(clone()[:5], recs[4]), recs[5:]...), 6},
		{"reordered records", cps, append(append(clone()[:4], recs[5], recs[4]), recs[6:]...), 5},
		{"truncated before a checkpoint", cps, clone()[:7], 8},
		{"checkpoint signed by another key", forged, recs, 8},
		{"first records dropped without an anchor", cps, clone()[3:], 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := verify(t, pub, tt.cps, tt.recs)
			if r.OK || r.BrokenAt != tt.brokenAt {
				t.Fatalf("report %+v, want broken at %d", r, tt.brokenAt)
			}
		})
	}
}

func TestChainVerifierAcceptsPrunedChainWithAnchor(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	recs, cps := chain(t, 10, key, 3, 9)
	cps[0].Anchor = true
	cps[0].Sign(key)
	if r := verify(t, pub, cps, recs[3:]); !r.OK || r.FirstSeq != 4 || r.Records != 7 {
		t.Fatalf("pruned chain with its anchor: %+v", r)
	}
}
