package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"sync/atomic"
	"syscall"

	"github.com/airlock-broker/airlock/internal/fault"
)

// The causes of a failed outbound call, as the caller, the log line and
// the audit record are told them: one fixed phrase per kind of failure,
// never the error's own text (it names hosts and addresses; a transport's
// error can carry the URL, and so a query credential). The error keeps the
// classified error as its From (errors.As reaches it).

// Who a round trip went to, named in its cause.
const (
	WhoUpstream = "upstream"
	WhoIssuer   = "issuer"
	WhoVault    = "Vault server"
)

// roundTrip is how far a round trip got before it failed: what a timeout
// was waiting for.
type roundTrip struct {
	trace     httptrace.ClientTrace
	connected atomic.Bool // a connection was had (dialed and, for TLS, its handshake done)
	written   atomic.Bool // the request was written: waiting for the answer's headers
}

// watch makes ctx report the round trip's progress to rt.
func (rt *roundTrip) watch(ctx context.Context) context.Context {
	rt.trace.GotConn = func(httptrace.GotConnInfo) { rt.connected.Store(true) }
	rt.trace.WroteRequest = func(httptrace.WroteRequestInfo) { rt.written.Store(true) }
	return httptrace.WithClientTrace(ctx, &rt.trace)
}

// phase of a timeout, for its cause.
type phase uint8

const (
	phaseUnknown phase = iota // a client that does not say (http.Client users)
	phaseConnect
	phaseSend
	phaseHeaders
	phaseBody
)

func (rt *roundTrip) phase() phase {
	switch {
	case rt == nil:
		return phaseUnknown
	case rt.written.Load():
		return phaseHeaders
	case rt.connected.Load():
		return phaseSend
	}
	return phaseConnect
}

// NetCause is the safe cause of a failed round trip to who (WhoUpstream,
// WhoIssuer, WhoVault): DNS, a refused, reset or closed connection, TLS
// with its verification reason, a timeout. Its texts are fixed phrases.
func NetCause(err error, who string) string {
	text, _ := netCause(err, who, phaseUnknown)
	return text
}

// netCause classifies err, a failed round trip to who in phase ph; timeout
// reports a timeout (upstream_timeout rather than upstream_error).
func netCause(err error, who string, ph phase) (text string, timeout bool) {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsNotFound:
			return "DNS: the " + who + "'s host name was not found", false
		case dns.IsTimeout:
			return "DNS: the lookup of the " + who + "'s host name timed out", true
		case dns.IsTemporary:
			return "DNS: the lookup of the " + who + "'s host name failed temporarily", false
		}
		return "DNS: the lookup of the " + who + "'s host name failed", false
	}
	if text := tlsCause(err, who); text != "" {
		return text, false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" && ph != phaseBody {
		ph = phaseConnect
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		switch ph {
		case phaseConnect:
			return who + " timed out connecting", true
		case phaseSend:
			return who + " timed out reading the request", true
		case phaseHeaders:
			return who + " timed out waiting for the answer's headers", true
		case phaseBody:
			return who + " timed out sending the answer", true
		}
		return who + " timed out", true
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused by the " + who, false
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by the " + who, false
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "the " + who + "'s network is unreachable", false
	case ph == phaseBody && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		return "the " + who + "'s answer was cut short", false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return "the " + who + " closed the connection before answering", false
	}
	if ph == phaseBody {
		return "the " + who + "'s answer could not be read", false
	}
	return "the round trip to the " + who + " failed", false
}

// tlsCause is the cause of a TLS failure, with its verification reason, or "".
func tlsCause(err error, who string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown):
		return "TLS: certificate signed by unknown authority"
	case errors.As(err, &host):
		return "TLS: certificate is not valid for the " + who + "'s host name"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "TLS: certificate expired or not yet valid"
		}
		return "TLS: certificate is not valid for its use"
	case errors.As(err, &verify):
		return "TLS: certificate verification failed"
	case errors.As(err, &header):
		return "TLS: the " + who + " did not answer in TLS"
	case errors.As(err, &alert):
		return "TLS: the " + who + " refused the handshake"
	}
	return ""
}

// failed is the error of a failed round trip: a Cause of ErrUpstream or,
// for a timeout, ErrTimeout.
func failed(err error, ph phase) error {
	text, timeout := netCause(err, WhoUpstream, ph)
	kind := ErrUpstream
	if timeout {
		kind = ErrTimeout
	}
	return fault.Because(kind, text, err)
}

// ReadFailed is the error of an answer whose body could not be read: its
// own cause when it has one (an answer that does not decode), else the
// classified failure (a reset, a cut, a timeout).
func ReadFailed(err error) error {
	if fault.CauseOf(err) != "" {
		return err
	}
	return failed(err, phaseBody)
}

// Causes of answers the broker will not pass on.
var (
	ErrSeveralEncodings   = fault.Because(ErrUpstream, "the upstream's answer has several content encodings", nil)
	ErrUnknownEncoding    = fault.Because(ErrUpstream, "the upstream's answer has a content encoding the broker cannot decode", nil)
	ErrUndecodable        = fault.Because(ErrUpstream, "the upstream's answer does not decode", nil)
	ErrUnaskedUpgrade     = fault.Because(ErrUpstream, "the upstream switched protocols unasked", nil)
	ErrNotWebSocket       = fault.Because(ErrUpstream, "the upstream's upgrade is not a WebSocket the broker can relay", nil)
	errUnbuildableRequest = fault.Because(ErrUpstream, "the request to the upstream could not be built", nil)
)

// Unavailable is a credential failure explained by text (a fixed phrase:
// "the credential file does not exist", "the issuer answered 401"); from
// is the error it explains, or nil.
func Unavailable(text string, from error) error {
	return fault.Because(ErrCredentialUnavailable, text, from)
}

// CredentialFailed is a credential failure from err, a source's or a
// minter's: err's own cause when it has one, else otherwise (a fixed
// phrase).
func CredentialFailed(err error, otherwise string) error {
	text := fault.CauseOf(err)
	if text == "" {
		text = otherwise
	}
	return Unavailable(text, err)
}
