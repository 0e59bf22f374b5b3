// Package proxyca is a session's own certificate authority for the
// transparent proxy door (DESIGN §8): an ECDSA P-256 CA valid no longer
// than its session, the leaf certificates it issues per host (cached), and
// its private key sealed at rest (AES-256-GCM under a key derived from the
// installation secret, bound to the session id). The private key never
// leaves this package unsealed: no method returns it and nothing logs it.
package proxyca

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Errors of the CA.
var (
	// ErrExpired: the CA (and so its session) is past its NotAfter.
	ErrExpired = errors.New("session CA expired")
	// ErrBadHost: the name cannot be a certificate's subject name.
	ErrBadHost = errors.New("invalid host name for a certificate")
	// ErrSealed: a sealed key does not open (another session, another
	// installation secret, tampered, or not a key of this certificate).
	ErrSealed = errors.New("sealed CA key does not open")
)

// MaxLeaves bounds the leaves cached per CA; the oldest goes first.
const MaxLeaves = 256

// backdate is how far before its creation a certificate is valid, for
// clients whose clocks run a little behind.
const backdate = time.Minute

// CA is one session's certificate authority. Safe for concurrent use.
type CA struct {
	sessionID string
	cert      *x509.Certificate
	certDER   []byte
	key       *ecdsa.PrivateKey
	now       func() time.Time

	mu     sync.Mutex
	leaves map[string]*leaf
	order  []string // hosts in issue order, for eviction
}

// leaf is a cache entry: the first caller issues it, the others wait on done.
type leaf struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// New makes a CA for session sessionID valid from a minute before now
// until expires (the session's expiry, never later).
func New(sessionID string, expires time.Time, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	t := now()
	if sessionID == "" || !expires.After(t) {
		return nil, errors.New("proxyca: a CA needs a session id and a future expiry")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Airlock"}, CommonName: "Airlock session CA " + sessionID},
		NotBefore:             t.Add(-backdate).UTC(),
		NotAfter:              expires.UTC(),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newCA(sessionID, cert, der, key, now), nil
}

func newCA(sessionID string, cert *x509.Certificate, der []byte, key *ecdsa.PrivateKey, now func() time.Time) *CA {
	return &CA{sessionID: sessionID, cert: cert, certDER: der, key: key, now: now, leaves: map[string]*leaf{}}
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// SessionID is the session the CA belongs to.
func (c *CA) SessionID() string { return c.sessionID }

// Certificate is the CA's certificate (public).
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// CertDER is the CA certificate, DER encoded (public).
func (c *CA) CertDER() []byte { return c.certDER }

// CertPEM is the CA certificate as PEM (what a sandbox trusts).
func (c *CA) CertPEM() []byte { return CertPEM(c.certDER) }

// CertPEM encodes a certificate's DER as PEM.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// String never shows the key.
func (c *CA) String() string { return "proxyca.CA{" + c.sessionID + "}" }

// CanonicalHost is the form leaves are issued and cached under: an IP
// address in its canonical text, or a lowercase ASCII DNS name without a
// trailing dot. Anything else (ports, wildcards, non-ASCII, empty labels)
// is ErrBadHost.
func CanonicalHost(host string) (string, error) {
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		if a.Zone() != "" {
			return "", ErrBadHost
		}
		return a.Unmap().String(), nil
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || len(h) > 253 {
		return "", ErrBadHost
	}
	for rest := h; ; {
		label, next, more := strings.Cut(rest, ".")
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", ErrBadHost
		}
		for i := 0; i < len(label); i++ {
			ch := label[i]
			if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
				return "", ErrBadHost
			}
		}
		if !more {
			return h, nil
		}
		rest = next
	}
}

// Leaf is a server certificate for host (a DNS name or an IP address)
// signed by the CA, valid until the CA expires, for serverAuth. Leaves are
// cached per host (at most MaxLeaves); concurrent first requests for one
// host issue it once.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	h, err := CanonicalHost(host)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrBadHost, truncate(host))
	}
	now := c.now()
	if !now.Before(c.cert.NotAfter) {
		return nil, ErrExpired
	}
	c.mu.Lock()
	e, ok := c.leaves[h]
	if !ok {
		e = &leaf{done: make(chan struct{})}
		c.leaves[h] = e
		c.order = append(c.order, h)
		if len(c.order) > MaxLeaves {
			delete(c.leaves, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.mu.Unlock()
	if ok {
		<-e.done
		return e.cert, e.err
	}
	e.cert, e.err = c.issue(h, now)
	if e.err != nil {
		c.mu.Lock()
		if c.leaves[h] == e { // let a later call try again
			delete(c.leaves, h)
			for i, o := range c.order {
				if o == h {
					c.order = append(c.order[:i], c.order[i+1:]...)
					break
				}
			}
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.cert, e.err
}

func (c *CA) issue(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-backdate)
	if notBefore.Before(c.cert.NotBefore) {
		notBefore = c.cert.NotBefore
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             notBefore.UTC(),
		NotAfter:              c.cert.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.certDER}, PrivateKey: key, Leaf: parsed}, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Sealer seals and opens CA private keys under one AES-256 key (derived
// from the installation secret by the broker).
type Sealer struct{ aead cipher.AEAD }

// sealVersion prefixes every sealed key, so the format can change.
const sealVersion = 1

// NewSealer makes a Sealer from a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, errors.New("proxyca: the sealing key must be 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// aad binds a sealed key to its session and its certificate: a key moved
// to another session's record, or beside another certificate, does not open.
func aad(sessionID string, certDER []byte) []byte {
	sum := sha256.Sum256(certDER)
	out := make([]byte, 0, 32+len(sessionID)+1+len(sum))
	out = append(out, "airlock proxy-ca key v1\x00"...)
	out = append(out, sessionID...)
	out = append(out, 0)
	return append(out, sum[:]...)
}

// Seal encrypts the CA's private key for storage beside its certificate.
func (s *Sealer) Seal(c *CA) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return nil, err
	}
	defer clear(der)
	nonce := make([]byte, s.aead.NonceSize(), 1+s.aead.NonceSize()+len(der)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{sealVersion}, nonce...)
	return s.aead.Seal(out, nonce, der, aad(c.sessionID, c.certDER)), nil
}

// Open rebuilds session sessionID's CA from its stored certificate and
// sealed key. Any mismatch (another session, another installation secret,
// a tampered byte, a key that is not the certificate's) is ErrSealed.
func (s *Sealer) Open(sessionID string, certDER, sealed []byte, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	ns := s.aead.NonceSize()
	if len(sealed) < 1+ns+s.aead.Overhead() || sealed[0] != sealVersion {
		return nil, ErrSealed
	}
	der, err := s.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], aad(sessionID, certDER))
	if err != nil {
		return nil, ErrSealed
	}
	defer clear(der)
	key, err := x509.ParseECPrivateKey(der)
	if err != nil {
		return nil, ErrSealed
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("proxyca: stored certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) || !cert.IsCA {
		return nil, ErrSealed
	}
	return newCA(sessionID, cert, append([]byte(nil), certDER...), key, now), nil
}
