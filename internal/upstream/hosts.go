package upstream

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Host is a destination an upstream answers to in proxy mode (DESIGN §8):
// a canonical host name, a one-label wildcard ("*.example.com" matches
// "a.example.com", never "example.com" nor "a.b.example.com"), or an exact
// IP address; with the one port it allows, or any port of the scheme's
// default (443 for a tunnel, 80 for plain HTTP) when Port is 0.
type Host struct {
	Name     string // canonical: lower case, no trailing dot; for a wildcard, the suffix after "*."
	Wildcard bool
	IP       netip.Addr // set when Name is an IP address (never a wildcard)
	Port     int        // 0: the scheme's default port
}

// ErrBadHost is a destination that is not a canonical host name or IP address.
var ErrBadHost = errors.New("not a valid host")

// String is the host as configuration writes it.
func (h Host) String() string {
	name := h.Name
	if h.Wildcard {
		name = "*." + name
	}
	if h.Port == 0 {
		if h.IP.Is6() {
			return "[" + name + "]"
		}
		return name
	}
	return net.JoinHostPort(name, strconv.Itoa(h.Port))
}

// ParseHost reads a configured host entry: "api.example.com",
// "api.example.com:8443", "*.example.com", "10.0.0.5", "[fd00::1]:8443".
func ParseHost(s string) (Host, error) {
	name, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return Host{}, errors.New("port must be 1-65535")
		}
		name, port = h, n
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		name = s[1 : len(s)-1]
	}
	var h Host
	h.Port = port
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		c, ip, err := CanonicalHost(rest)
		if err != nil || ip.IsValid() || !strings.Contains(c, ".") {
			return Host{}, errors.New("a wildcard is \"*.\" followed by a host name of at least two labels")
		}
		h.Name, h.Wildcard = c, true
		return h, nil
	}
	c, ip, err := CanonicalHost(name)
	if err != nil {
		return Host{}, err
	}
	h.Name, h.IP = c, ip
	return h, nil
}

// CanonicalHost reads a host as a client names it (in a CONNECT target, an
// absolute URL, a Host header or a TLS server name): an IP address (IPv6
// without brackets; returned in its canonical text, an IPv4-mapped IPv6
// address as IPv4), or a DNS name of letters, digits and hyphens, compared
// in lower case without a trailing dot. Anything else is ErrBadHost:
// non-ASCII names (no IDNA mapping is guessed: a client sends the
// "xn--" form), empty labels, underscores, and names whose last label is
// numeric ("127.1", "0x7f.1", "2130706433"), which some resolvers read as
// IP addresses.
func CanonicalHost(s string) (string, netip.Addr, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, ErrBadHost
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", netip.Addr{}, ErrBadHost
	}
	var b []byte // lowered copy, only when needed
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			c := s[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			case c >= 'A' && c <= 'Z':
				if b == nil {
					b = []byte(s)
				}
				b[i] = c + 'a' - 'A'
			default:
				return "", netip.Addr{}, ErrBadHost
			}
			continue
		}
		label := s[start:i]
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", netip.Addr{}, ErrBadHost
		}
		start = i + 1
	}
	if b != nil {
		s = string(b)
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	if numericLabel(last) {
		return "", netip.Addr{}, ErrBadHost
	}
	return s, netip.Addr{}, nil
}

// numericLabel reports whether a label reads as a number to inet_aton-style
// parsers (decimal, octal or 0x-hex).
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(h); i++ {
			if !(h[i] >= '0' && h[i] <= '9' || h[i] >= 'a' && h[i] <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// Match reports whether the canonical host name and port are this entry's;
// defaultPort is the scheme's (443 for a tunnel, 80 for plain HTTP).
func (h Host) Match(name string, port, defaultPort int) bool {
	want := h.Port
	if want == 0 {
		want = defaultPort
	}
	if port != want {
		return false
	}
	if !h.Wildcard {
		return name == h.Name
	}
	label, rest, ok := strings.Cut(name, ".")
	return ok && label != "" && rest == h.Name
}

// Overlaps reports whether some destination matches both entries (on some
// port): two upstreams claiming one host is a configuration error.
func (h Host) Overlaps(o Host) bool {
	ports := func(p int) []int {
		if p == 0 {
			return []int{443, 80}
		}
		return []int{p}
	}
	for _, p := range ports(h.Port) {
		for _, q := range ports(o.Port) {
			if p != q {
				continue
			}
			switch {
			case h.Wildcard == o.Wildcard:
				if h.Name == o.Name {
					return true
				}
			case h.Wildcard:
				if h.Match(o.Name, p, p) {
					return true
				}
			default:
				if o.Match(h.Name, p, p) {
					return true
				}
			}
		}
	}
	return false
}

// SpecialAddress names why an IP address is never a destination unless an
// upstream names it exactly ("" for an ordinary public address): loopback,
// link-local (the cloud metadata service at 169.254.169.254 and
// fd00:ec2::254 among them), private (RFC 1918, unique local fc00::/7),
// shared (CGNAT 100.64.0.0/10), unspecified or multicast.
func SpecialAddress(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip == metadataV6 || ip == metadataV4:
		return "a cloud metadata address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "a link-local address"
	case ip.IsPrivate():
		return "a private address"
	case cgnat.Contains(ip):
		return "a shared (CGNAT) address"
	case ip.IsUnspecified(), ip.IsMulticast():
		return "not a unicast address"
	}
	return ""
}

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
	cgnat      = netip.MustParsePrefix("100.64.0.0/10")
)
