package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// sealWithJSON is the encoder the hash chain was defined with: the oracle
// the hand-written one must match byte for byte.
// Invalid UTF-8 is made valid first (see appendString).
func sealWithJSON(e Event) ([]byte, string, error) {
	for _, s := range []*string{&e.Type, &e.Actor.Kind, &e.Actor.ID, &e.RequestID, &e.SessionID, &e.TaskID, &e.GrantID,
		&e.ActionID, &e.TraceID, &e.SpanID, &e.Upstream, &e.Method, &e.Path, &e.Decision, &e.Code, &e.Reason, &e.PrevHash} {
		*s = validUTF8(*s)
	}
	e.Hash = ""
	body, err := json.Marshal(e)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(body)
	e.Hash = hex.EncodeToString(sum[:])
	out, err := json.Marshal(e)
	return out, e.Hash, err
}

// validUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

func FuzzEventEncoding(f *testing.F) {
	f.Add(uint64(1), int64(1764680000123456789), 0, "call.allowed", "sandbox", "ses_1", "req", "/v1/x?a=<b>&c", "deny", "no_grant", "quoted \"x\" \\ \n\t", 200, int64(1234), "")
	f.Add(uint64(0), int64(0), 3600, "", "", "", "", "\u2028\u2029\x00\x1f\x7f", "", "", "\xff\xfe invalid", 0, int64(-5), "abc")
	f.Add(uint64(1<<63), int64(-62135596800000000000/1000), -5*3600-30*60, "t", "k", "é漢字", "🔑", "&amp;", "d", "c", "r", -1, int64(1<<62), "ffff")
	f.Fuzz(func(t *testing.T, seq uint64, nanos int64, offset int, typ, kind, id, req, path, decision, code, reason string, status int, n int64, prev string) {
		// The writer stores UTC; other whole-minute offsets must still encode
		// as encoding/json does.
		at := time.Unix(0, nanos).UTC()
		if offset %= 24 * 60; offset != 0 {
			at = at.In(time.FixedZone("z", offset*60))
		}
		e := Event{
			Seq: seq, Time: at, Type: typ,
			Actor: Actor{Kind: kind, ID: id}, RequestID: req, SessionID: id, TaskID: reason, GrantID: code,
			ActionID: decision, TraceID: path, SpanID: req, Upstream: kind, Method: typ, Path: path, Decision: decision, Code: code,
			Reason: reason, Status: status, LatencyUS: n, BytesIn: -n, BytesOut: n / 3, PrevHash: prev,
		}
		want, wantHash, werr := sealWithJSON(e)
		got, gerr := seal(&e)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("errors differ: json %v, seal %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !bytes.Equal(got, want) || e.Hash != wantHash {
			t.Fatalf("encodings differ:\n json %s\n seal %s", want, got)
		}
		var v Verifier
		if err := v.Next(got); err != nil && offset == 0 {
			t.Fatalf("a sealed record does not verify: %v", err)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	e := Event{Seq: 123456, Time: time.Now().UTC(), Type: TypeCallAllowed, Actor: Actor{Kind: "sandbox", ID: "ses_0123456789abcdef"},
		RequestID: "req_0123456789abcdef", SessionID: "ses_0123456789abcdef", TaskID: "task-42", GrantID: "grt_0123456789abcdef",
		Upstream: "api", Method: "POST", Path: "/orders?page=2", Decision: "allow", PrevHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ev := e
			if _, err := seal(&ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := sealWithJSON(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An MCP record part encodes as encoding/json encodes it, and a decoded
// record re-encodes to the bytes that were hashed (the verifier's check).
func TestMCPRecordEncoding(t *testing.T) {
	e := Event{Seq: 7, Time: time.Unix(1764680000, 5).UTC(), Type: "mcp.call.allowed", Actor: Actor{Kind: "sandbox", ID: "ses_1"},
		Upstream: "issues", Decision: "allow", PrevHash: "ab",
		MCP: &MCP{Tool: "create_issue", ArgsSHA256: "00ff", Constrained: map[string]string{"args.repo": `"acme/<web>"`, "args.n": "1e+21"},
			Shown: []string{"a", "b"}, Hidden: []string{}, Digest: "sha256:1", Redactions: 2, IsError: true}}
	want, wantHash, err := sealWithJSON(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := seal(&e)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || e.Hash != wantHash {
		t.Fatalf("encodings differ:\n json %s\n seal %s", want, got)
	}
	var v Verifier
	if err := v.Next(got); err != nil {
		t.Fatalf("a sealed MCP record does not verify: %v", err)
	}
	tampered := bytes.Replace(got, []byte("acme/"), []byte("evil/"), 1)
	if err := (&Verifier{}).Next(tampered); err == nil {
		t.Fatal("a tampered MCP record verifies")
	}
}
