package broker

import (
	"fmt"
	"net"
	"strconv"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/upstream"
)

// ErrEgressDenied is a proxy-door destination the session may not reach:
// not a valid host, a host no upstream names, or a host of an upstream the
// session holds no live grant on. Refuse records it as egress.denied, with
// the destination as the record's path.
var ErrEgressDenied = fault.New(fault.EgressDenied, "egress denied")

// Destination is where a proxy-door client asked to go, as the broker read it.
type Destination struct {
	Host     string // canonical (see upstream.CanonicalHost)
	Port     int
	Upstream string // the upstream whose hosts name it
}

// String is host:port.
func (d Destination) String() string { return net.JoinHostPort(d.Host, strconv.Itoa(d.Port)) }

// Egress decides whether the admitted caller may reach host:port through
// the proxy door (DESIGN §8): a tunnel (CONNECT; an upstream host without a
// port allows 443) or a plain-HTTP request (port 80). Allowed only to a host
// that an upstream's hosts name, when the session holds a live grant (not
// revoked, not expired) on that upstream. Everything else is refused,
// wrapping ErrEgressDenied: a host that is not canonical ASCII, any IP
// address (loopback, link-local and metadata, private, CGNAT, public) no
// upstream names exactly, any other name no upstream names. The broker
// never resolves or dials the destination: it maps it to the upstream,
// whose configured base URL the call goes to. On success the call is a call
// to that upstream.
func (c *call) egress(host string, port int, tunnel bool) (Destination, error) {
	c.rec.Path = clip(net.JoinHostPort(host, strconv.Itoa(port)), 300)
	if c.step != stepAdmitted {
		return Destination{}, ErrOutOfOrder
	}
	name, ip, err := upstream.CanonicalHost(host)
	if err != nil || port < 1 || port > 65535 {
		return Destination{}, fmt.Errorf("%w: the destination is not a host name (ASCII letters, digits, '-') or an IP address with a port", ErrEgressDenied)
	}
	d := Destination{Host: name, Port: port}
	c.rec.Path = d.String()
	def := 80
	if tunnel {
		def = 443
	}
	u := c.b.hostUpstream(name, port, def)
	if u == nil {
		if ip.IsValid() {
			if why := upstream.SpecialAddress(ip); why != "" {
				return d, fmt.Errorf("%w: %s is %s and no upstream names it", ErrEgressDenied, d, why)
			}
			return d, fmt.Errorf("%w: %s is an IP address no upstream names", ErrEgressDenied, d)
		}
		return d, fmt.Errorf("%w: no upstream names %s", ErrEgressDenied, d)
	}
	d.Upstream = u.Name
	c.name, c.rec.Upstream = u.Name, u.Name
	now := c.b.now()
	// A grant another broker added is read through, as a refused call's is
	// (decideFresh): a grant made on one replica opens the door on all.
	if c.l.LiveGrantOn(u.Name, now) || c.b.resync(c.l) && c.l.LiveGrantOn(u.Name, now) {
		c.dest = d
		return d, nil
	}
	return d, fmt.Errorf("%w: the session holds no live grant on upstream %q (%s)", ErrEgressDenied, u.Name, d)
}

// hostUpstream is the upstream whose hosts name the canonical host and
// port (configuration lets at most one), or nil.
func (b *Broker) hostUpstream(name string, port, defaultPort int) *upstream.Upstream {
	for _, u := range b.upstreams {
		for _, h := range u.Hosts {
			if h.Match(name, port, defaultPort) {
				return u
			}
		}
	}
	return nil
}
