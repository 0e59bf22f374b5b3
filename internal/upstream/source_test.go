package upstream_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/sourcetest"
)

func TestEnvSourceContract(t *testing.T) {
	src, err := upstream.NewEnvSource("K", func(string) string { return "CANARY-env-value" })
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Run(t, sourcetest.Fixture{Src: src, Value: "CANARY-env-value"})
	if _, err := upstream.NewEnvSource("K", func(string) string { return "" }); err == nil {
		t.Fatal("an unset variable was accepted")
	}
}

func TestFileSourceContract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	write := func(t *testing.T, v string) {
		// Rename into place, as secret managers do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(t, "CANARY-file-value")
	sourcetest.Run(t, sourcetest.Fixture{
		Src: upstream.NewFileSource(path), Value: "CANARY-file-value", Bound: 100 * time.Millisecond,
		Rotate:  write,
		Outage:  func(t *testing.T) { _ = os.Remove(path) },
		Recover: write,
	})
}

func TestStaticAWSSourceContract(t *testing.T) {
	sourcetest.Run(t, sourcetest.Fixture{Src: upstream.AWSSource(upstream.StaticAWSCredentials("AKIAEXAMPLE", "CANARY-aws-static"), "aws:env"), Value: "CANARY-aws-static"})
}
