package httpapi

import (
	"net/netip"
	"testing"

	"github.com/airlock-broker/airlock/internal/broker"
)

// TestHostMatches: a request inside a tunnel names the tunnel's host (the
// port may be left out for 443), in any spelling that canonicalizes to it,
// and nothing else; the forms clients send cost no allocation (it runs on
// every request in a tunnel).
func TestHostMatches(t *testing.T) {
	web := newTunnel("tok", netip.Addr{}, broker.Destination{Host: "api.example.com", Port: 443})
	alt := newTunnel("tok", netip.Addr{}, broker.Destination{Host: "api.example.com", Port: 8443})
	v6 := newTunnel("tok", netip.Addr{}, broker.Destination{Host: "fd00::1", Port: 443})
	ip4 := newTunnel("tok", netip.Addr{}, broker.Destination{Host: "10.0.0.5", Port: 443})
	cases := []struct {
		host string
		t    *tunnel
		want bool
	}{
		{"api.example.com", web, true},
		{"api.example.com:443", web, true},
		{"API.Example.COM", web, true},
		{"api.example.com.", web, true},
		{"api.example.com.:443", web, true},
		{"api.example.com:0443", web, false},
		{"api.example.com:8443", web, false},
		{"api.example.com:", web, false},
		{"other.example.com", web, false},
		{"api.example.com.evil.test", web, false},
		{"", web, false},
		{"api.example.com:8443", alt, true},
		{"api.example.com", alt, false},
		{"api.example.com:443", alt, false},
		{"[fd00::1]", v6, true},
		{"[fd00::1]:443", v6, true},
		{"[FD00:0::1]:443", v6, true},
		{"[fd00::2]", v6, false},
		{"10.0.0.5", ip4, true},
		{"10.0.0.5:443", ip4, true},
		{"[::ffff:10.0.0.5]", ip4, true},
		{"10.0.0.6", ip4, false},
	}
	for _, c := range cases {
		if got := hostMatches(c.host, c.t); got != c.want {
			t.Errorf("hostMatches(%q, %s) = %v, want %v", c.host, c.t.authority, got, c.want)
		}
	}
	for _, host := range []string{"api.example.com", "api.example.com:443"} {
		if n := testing.AllocsPerRun(100, func() { hostMatches(host, web) }); n != 0 {
			t.Errorf("hostMatches(%q): %v allocations", host, n)
		}
	}
}
