package upstream

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// ErrCredentialUnavailable means the credential could not be had; the call
// must not be made without it (fail closed).
var ErrCredentialUnavailable = fault.Hidden(fault.CredentialUnavailable, "credential unavailable")

// Secret holds a credential. It redacts itself everywhere it could be
// printed; Reveal is the one way to the value.
type Secret struct{ v string }

// NewSecret wraps a value.
func NewSecret(v string) Secret { return Secret{v: v} }

// Reveal returns the value, for injection only.
func (s Secret) Reveal() string { return s.v }

// IsZero reports an empty secret.
func (s Secret) IsZero() bool { return s.v == "" }

func (Secret) String() string                { return "[REDACTED]" }
func (Secret) GoString() string              { return "[REDACTED]" }
func (Secret) LogValue() slog.Value          { return slog.StringValue("[REDACTED]") }
func (Secret) MarshalJSON() ([]byte, error)  { return []byte(`"[REDACTED]"`), nil }
func (Secret) MarshalText() ([]byte, error)  { return []byte("[REDACTED]"), nil }
func (Secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte("[REDACTED]")) }

// Source fetches a credential. Fetch returns an error wrapping
// ErrCredentialUnavailable when it cannot; it never returns a stale value
// past its validity.
type Source interface {
	Fetch(ctx context.Context) (Secret, error)
	// Describe names the source for operators (never the value).
	Describe() string
}

// FetchInfo describes a credential fetch for the audit log (never the value).
type FetchInfo struct {
	Source  string
	LeaseID string // to be HMAC'd by the recorder
	Version int
}

// Observable sources report their fetches.
type Observable interface {
	SetObserver(func(FetchInfo))
}

// EnvSource is a credential read from an environment variable at start.
type EnvSource struct {
	name   string
	secret Secret
}

// NewEnvSource reads variable name through getenv.
func NewEnvSource(name string, getenv func(string) string) (*EnvSource, error) {
	v := getenv(name)
	if v == "" {
		return nil, fmt.Errorf("environment variable %s is empty or unset", name)
	}
	return &EnvSource{name: name, secret: NewSecret(v)}, nil
}

// Fetch implements Source.
func (s *EnvSource) Fetch(context.Context) (Secret, error) { return s.secret, nil }

// Describe implements Source.
func (s *EnvSource) Describe() string { return "env:" + s.name }

// FileSource is a credential read from a file, re-read when the file
// changes (rotation), trailing newlines trimmed.
type FileSource struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	secret  Secret
}

// NewFileSource reads path on first use.
func NewFileSource(path string) *FileSource { return &FileSource{path: path} }

// Fetch implements Source.
func (s *FileSource) Fetch(context.Context) (Secret, error) {
	st, err := os.Stat(s.path)
	if err != nil {
		return Secret{}, fmt.Errorf("%s: %w", s.Describe(), fileUnavailable(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.secret.IsZero() && st.ModTime().Equal(s.modTime) && st.Size() == s.size {
		return s.secret, nil
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return Secret{}, fmt.Errorf("%s: %w", s.Describe(), fileUnavailable(err))
	}
	sec := NewSecret(strings.TrimRight(string(data), "\r\n"))
	if sec.IsZero() {
		return Secret{}, fmt.Errorf("%s: %w", s.Describe(), errFileEmpty)
	}
	s.secret, s.modTime, s.size = sec, st.ModTime(), st.Size()
	return sec, nil
}

// Describe implements Source.
func (s *FileSource) Describe() string { return "file:" + s.path }

var errFileEmpty = Unavailable("the credential file is empty", nil)

// fileUnavailable is the cause of a credential file that cannot be read.
func fileUnavailable(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Unavailable("the credential file does not exist", err)
	case errors.Is(err, fs.ErrPermission):
		return Unavailable("the credential file is not readable (permission denied)", err)
	}
	return Unavailable("the credential file cannot be read", err)
}
