package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-broker/airlock/client"
	"github.com/airlock-broker/airlock/internal/audit"
)

// A bundle is a directory an auditor can verify offline:
//
//	records.jsonl      every record, as stored (hash-chained)
//	checkpoints.json   the signed checkpoints
//	public-key.txt     the base64 Ed25519 key, for reference (verify with a key obtained out of band)
const (
	bundleRecords     = "records.jsonl"
	bundleCheckpoints = "checkpoints.json"
	bundleKey         = "public-key.txt"
)

func writeBundle(ctx context.Context, c *client.Client, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Checkpoints first: every record they name is then in the export.
	var cps struct {
		Items []audit.Checkpoint `json:"items"`
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/audit/checkpoints", nil, &cps); err != nil {
		return err
	}
	var key struct {
		PublicKey string `json:"public_key"`
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/audit/public-key", nil, &key); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, bundleRecords), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := c.Stream(ctx, "/v1/audit", bw); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(bw.Flush(), f.Close()); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(cps.Items, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, bundleCheckpoints), data, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, bundleKey), []byte(key.PublicKey+"\n"), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bundle written to %s (%d checkpoints)\n", dir, len(cps.Items))
	return nil
}

// verifyBundle checks a bundle offline: the hash chain, every checkpoint's
// signature, and that each checkpoint matches its record.
func verifyBundle(dir, keyArg string, stdout io.Writer) error {
	if keyArg == "" {
		return errors.New("audit verify BUNDLE needs --public-key (from a trusted channel, not from the bundle)")
	}
	if data, err := os.ReadFile(keyArg); err == nil {
		keyArg = strings.TrimSpace(string(data))
	}
	pub, err := audit.ParsePublicKey(keyArg)
	if err != nil {
		return err
	}
	var cps []audit.Checkpoint
	data, err := os.ReadFile(filepath.Join(dir, bundleCheckpoints))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &cps); err != nil {
		return fmt.Errorf("%s: %w", bundleCheckpoints, err)
	}
	cv, err := audit.NewChainVerifier(pub, cps)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(dir, bundleRecords))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := cv.Next(sc.Bytes()); err != nil {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	rep := cv.Finish()
	out, _ := json.MarshalIndent(rep, "", "  ")
	fmt.Fprintln(stdout, string(out))
	if !rep.OK {
		return fmt.Errorf("verification failed at seq %d: %s", rep.BrokenAt, rep.Reason)
	}
	return nil
}
