package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

func TestAuditBundleVerifiesOfflineAndCatchesTampering(t *testing.T) {
	up := brokertest.NewUpstream(t)
	data := t.TempDir()
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data, ExtraYAML: "audit: {checkpoint_every: 5}\n"})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	for i := 0; i < 12; i++ {
		b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	}
	b.Do("GET", b.Sandbox+"/v1/proxy/api/nope", s.Token, nil)
	var key struct {
		PublicKey string `json:"public_key"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/public-key", "", nil).Body, &key)
	b.Stop() // shutdown signs the head

	b = startBroker(t, brokertest.ProcOptions{Upstream: up.URL, DataDir: data})
	var rep struct {
		OK             bool   `json:"ok"`
		Records        uint64 `json:"records"`
		LastSeq        uint64 `json:"last_seq"`
		LastCheckpoint uint64 `json:"last_checkpoint"`
		Checkpoints    int    `json:"checkpoints"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/verify", brokertest.ProcAdminToken, nil).Body, &rep)
	if !rep.OK || rep.Checkpoints < 3 {
		t.Fatalf("online verify: %+v", rep)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if out, err := cli(b, brokertest.ProcAdminToken, "", "audit", "export", "--bundle", dir); err != nil {
		t.Fatalf("export bundle: %v %s", err, out)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	_ = os.WriteFile(keyFile, []byte(key.PublicKey), 0o600)
	// Offline: no server, no token.
	var out bytes.Buffer
	err := run(t.Context(), []string{"audit", "verify", dir, "--public-key", keyFile}, func(string) string { return "" }, nil, &out, &out)
	if err != nil || !strings.Contains(out.String(), `"ok": true`) {
		t.Fatalf("offline verify of an intact bundle: %v\n%s", err, out.String())
	}
	brokertest.AssertNoCanary(t, "audit bundle", mustRead(t, filepath.Join(dir, "records.jsonl")))

	records := mustRead(t, filepath.Join(dir, "records.jsonl"))
	lines := bytes.Split(bytes.TrimSpace(records), []byte("\n"))
	tamper := map[string][][]byte{
		"modified":  replaceLine(lines, 3, bytes.Replace(lines[3], []byte(`"GET"`), []byte(`"PUT"`), 1)),
		"deleted":   append(append([][]byte{}, lines[:3]...), lines[4:]...),
		"reordered": append(append(append([][]byte{}, lines[:3]...), lines[4], lines[3]), lines[5:]...),
		"truncated": lines[:4],
	}
	for name, ls := range tamper {
		bad := filepath.Join(t.TempDir(), name)
		_ = os.MkdirAll(bad, 0o700)
		_ = os.WriteFile(filepath.Join(bad, "records.jsonl"), append(bytes.Join(ls, []byte("\n")), '\n'), 0o600)
		_ = os.WriteFile(filepath.Join(bad, "checkpoints.json"), mustRead(t, filepath.Join(dir, "checkpoints.json")), 0o600)
		out.Reset()
		err := run(t.Context(), []string{"audit", "verify", bad, "--public-key", key.PublicKey}, func(string) string { return "" }, nil, &out, &out)
		if err == nil || !strings.Contains(out.String(), `"broken_at"`) {
			t.Errorf("%s bundle verified: %v\n%s", name, err, out.String())
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func replaceLine(lines [][]byte, i int, l []byte) [][]byte {
	out := append([][]byte{}, lines...)
	out[i] = l
	return out
}

func TestAuditFormatsAndPrune(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	s := b.Session(brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"})))
	for i := 0; i < 5; i++ {
		b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	}
	b.Do("DELETE", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	all := brokertest.ParseAudit(t, b.AuditExport())

	r := b.Do("GET", b.Control+"/v1/audit?format=csv", brokertest.ProcAdminToken, nil)
	rows, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
	if err != nil || len(rows) < len(all)+1 || rows[0][0] != "seq" || r.Header.Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Fatalf("csv: %d rows for %d records, %v", len(rows), len(all), err)
	}
	r = b.Do("GET", b.Control+"/v1/audit?format=ocsf&type=call.denied", brokertest.ProcAdminToken, nil)
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	n := 0
	for sc.Scan() {
		var o struct {
			ClassUID int    `json:"class_uid"`
			TypeUID  int    `json:"type_uid"`
			Status   string `json:"status"`
			HTTP     struct {
				Method string `json:"http_method"`
			} `json:"http_request"`
		}
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil || o.ClassUID != 6003 || o.TypeUID != 600304 || o.Status != "Failure" || o.HTTP.Method != "DELETE" {
			t.Fatalf("ocsf line %s: %+v %v", sc.Bytes(), o, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("ocsf filtered to call.denied: %d events", n)
	}
	b.Do("GET", b.Control+"/v1/audit?format=xml", brokertest.ProcAdminToken, nil).WantProblem(t, 400, "bad_request")

	// Prune everything but the newest records: what remains verifies.
	cut := time.Now().UTC().Add(time.Second).Format(time.RFC3339Nano)
	b.Do("GET", b.Control+"/v1/audit?since=not-a-time", brokertest.ProcAdminToken, nil).WantProblem(t, 400, "bad_request")
	if r := b.Do("DELETE", b.Control+"/v1/audit?before="+cut, s.Token, nil); r.Status != 401 {
		t.Fatalf("a sandbox token pruned the log: %d", r.Status)
	}
	r = b.Do("DELETE", b.Control+"/v1/audit?before="+cut, brokertest.ProcAdminToken, nil)
	var pr struct {
		Deleted uint64 `json:"deleted"`
	}
	_ = json.Unmarshal(r.Body, &pr)
	if r.Status != 200 || pr.Deleted < uint64(len(all)-1) {
		t.Fatalf("prune: %d %s (had at least %d records)", r.Status, r.Body, len(all))
	}
	var rep struct {
		OK       bool   `json:"ok"`
		FirstSeq uint64 `json:"first_seq"`
		Reason   string `json:"reason"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/verify", brokertest.ProcAdminToken, nil).Body, &rep)
	if !rep.OK || rep.FirstSeq != pr.Deleted+1 {
		t.Fatalf("after prune: %+v", rep)
	}
	// The chain goes on after pruning.
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/verify", brokertest.ProcAdminToken, nil).Body, &rep)
	if !rep.OK {
		t.Fatalf("after prune and new calls: %+v", rep)
	}
}
