package upstream

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// HMACSigning signs each outbound request with the upstream's secret as the
// HMAC key, for APIs that authenticate a request by its signature rather
// than a bearer token. The signature covers the request the broker checked
// and sends, never anything the sandbox could change after the check.
//
// Over is the canonical string, a template of these placeholders (any other
// text is literal; "\n" in YAML is a newline):
//
//	{method}       the method, upper case
//	{path}         the escaped path as sent: the base URL's path joined with the checked canonical path
//	{query}        the re-encoded checked query as sent ("" when none)
//	{timestamp}    the signing time, Unix seconds
//	{body_sha256}  the lower-case hex SHA-256 of the body bytes sent (of "" when none)
//	{host}         the upstream's host (and port) as sent
//
// Format is the header's value, of {timestamp} and {signature} (the MAC in
// Encoding) and literal text.
type HMACSigning struct {
	Header    string // e.g. X-Signature
	Algorithm string // sha256 | sha512
	Encoding  string // hex (default) | base64
	Format    string // e.g. "t={timestamp},v1={signature}"
	Over      string // the canonical string's template
}

// Defaults of HMACSigning.
const (
	DefaultHMACFormat = "t={timestamp},v1={signature}"
	DefaultHMACOver   = "{method}\n{path}\n{query}\n{timestamp}\n{body_sha256}"
)

// hmacPlaceholders are what Over may name.
var hmacPlaceholders = []string{"{method}", "{path}", "{query}", "{timestamp}", "{body_sha256}", "{host}"}

// Validate checks the spec, filling defaults.
func (h *HMACSigning) Validate() error {
	if h.Header == "" {
		return errors.New("header is required")
	}
	if strings.ContainsAny(h.Header, " :\r\n") {
		return errors.New("header is not a valid header name")
	}
	switch h.Algorithm {
	case "":
		h.Algorithm = "sha256"
	case "sha256", "sha512":
	default:
		return errors.New("algorithm must be sha256 or sha512")
	}
	switch h.Encoding {
	case "":
		h.Encoding = "hex"
	case "hex", "base64":
	default:
		return errors.New("encoding must be hex or base64")
	}
	if h.Format == "" {
		h.Format = DefaultHMACFormat
	}
	if !strings.Contains(h.Format, "{signature}") {
		return errors.New("format must contain {signature}")
	}
	if rest := strings.NewReplacer("{signature}", "", "{timestamp}", "").Replace(h.Format); strings.ContainsAny(rest, "{}\r\n") {
		return errors.New("format may name only {signature} and {timestamp}, and holds no line break")
	}
	if h.Over == "" {
		h.Over = DefaultHMACOver
	}
	rest := h.Over
	for _, p := range hmacPlaceholders {
		rest = strings.ReplaceAll(rest, p, "")
	}
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("over may name only %s", strings.Join(hmacPlaceholders, ", "))
	}
	if !strings.Contains(h.Over, "{method}") || !strings.Contains(h.Over, "{path}") {
		return errors.New("over must cover at least {method} and {path}")
	}
	return nil
}

// SignedRequest is what a signature covers.
type SignedRequest struct {
	Method string
	Host   string
	Path   string // escaped, as sent
	Query  string // encoded, as sent
	Body   []byte
	Time   time.Time
}

// Canonical is the string the MAC is computed over.
func (h *HMACSigning) Canonical(r SignedRequest) string {
	ts := strconv.FormatInt(r.Time.Unix(), 10)
	var b strings.Builder
	over := h.Over
	for len(over) > 0 {
		i := strings.IndexByte(over, '{')
		if i < 0 {
			b.WriteString(over)
			break
		}
		b.WriteString(over[:i])
		over = over[i:]
		j := strings.IndexByte(over, '}')
		if j < 0 {
			b.WriteString(over)
			break
		}
		switch over[:j+1] {
		case "{method}":
			b.WriteString(strings.ToUpper(r.Method))
		case "{path}":
			b.WriteString(r.Path)
		case "{query}":
			b.WriteString(r.Query)
		case "{timestamp}":
			b.WriteString(ts)
		case "{body_sha256}":
			sum := sha256.Sum256(r.Body)
			b.WriteString(hex.EncodeToString(sum[:]))
		case "{host}":
			b.WriteString(r.Host)
		default:
			b.WriteString(over[:j+1])
		}
		over = over[j+1:]
	}
	return b.String()
}

// Sign is the header's value for r under key.
func (h *HMACSigning) Sign(key Secret, r SignedRequest) string {
	var fn func() hash.Hash = sha256.New
	if h.Algorithm == "sha512" {
		fn = sha512.New
	}
	m := hmac.New(fn, []byte(key.Reveal()))
	m.Write([]byte(h.Canonical(r)))
	sum := m.Sum(nil)
	sig := hex.EncodeToString(sum)
	if h.Encoding == "base64" {
		sig = base64.StdEncoding.EncodeToString(sum)
	}
	return strings.NewReplacer("{signature}", sig, "{timestamp}", strconv.FormatInt(r.Time.Unix(), 10)).Replace(h.Format)
}
