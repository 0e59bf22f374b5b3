package upstream

import (
	"net/netip"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		ip             bool
		bad            bool
	}{
		{name: "lower", in: "api.github.com", want: "api.github.com"},
		{name: "upper", in: "API.GitHub.COM", want: "api.github.com"},
		{name: "trailing dot", in: "api.github.com.", want: "api.github.com"},
		{name: "single label", in: "localhost", want: "localhost"},
		{name: "ipv4", in: "10.0.0.1", want: "10.0.0.1", ip: true},
		{name: "ipv6", in: "FD00:EC2:0::254", want: "fd00:ec2::254", ip: true},
		{name: "mapped ipv4", in: "::ffff:169.254.169.254", want: "169.254.169.254", ip: true},
		{name: "fail-zone", in: "fe80::1%eth0", bad: true},
		{name: "fail-empty", in: "", bad: true},
		{name: "fail-dot", in: ".", bad: true},
		{name: "fail-empty label", in: "a..b", bad: true},
		{name: "fail-underscore", in: "api_github.com", bad: true},
		{name: "fail-non-ascii", in: "аpple.com", bad: true},
		{name: "fail-hyphen start", in: "-a.com", bad: true},
		{name: "fail-hyphen end", in: "a-.com", bad: true},
		{name: "fail-numeric last label", in: "127.1", bad: true},
		{name: "fail-decimal address", in: "2130706433", bad: true},
		{name: "fail-hex label", in: "0x7f.1", bad: true},
		{name: "fail-hex last", in: "a.0x7f", bad: true},
		{name: "fail-space", in: "a b.com", bad: true},
		{name: "fail-brackets", in: "[::1]", bad: true},
		{name: "fail-port", in: "a.com:443", bad: true},
		{name: "fail-star", in: "*.a.com", bad: true},
		{name: "fail-long label", in: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", bad: true},
		{name: "ok-punycode", in: "xn--80ak6aa92e.com", want: "xn--80ak6aa92e.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ip, err := CanonicalHost(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("CanonicalHost(%q) = %q, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want || ip.IsValid() != tc.ip {
				t.Fatalf("CanonicalHost(%q) = %q %v %v, want %q ip=%v", tc.in, got, ip, err, tc.want, tc.ip)
			}
		})
	}
}

func TestHostMatch(t *testing.T) {
	must := func(s string) Host {
		h, err := ParseHost(s)
		if err != nil {
			t.Fatalf("ParseHost(%q): %v", s, err)
		}
		return h
	}
	for _, tc := range []struct {
		entry, name string
		port, def   int
		want        bool
	}{
		{"api.github.com", "api.github.com", 443, 443, true},
		{"api.github.com", "api.github.com", 80, 80, true},
		{"api.github.com", "api.github.com", 8443, 443, false},
		{"api.github.com:8443", "api.github.com", 8443, 443, true},
		{"api.github.com:8443", "api.github.com", 443, 443, false},
		{"API.github.com.", "api.github.com", 443, 443, true},
		{"*.example.com", "a.example.com", 443, 443, true},
		{"*.example.com", "example.com", 443, 443, false},
		{"*.example.com", "a.b.example.com", 443, 443, false},
		{"*.example.com", "aexample.com", 443, 443, false},
		{"10.0.0.5", "10.0.0.5", 443, 443, true},
		{"[fd00::1]:8443", "fd00::1", 8443, 443, true},
		{"10.0.0.5", "10.0.0.6", 443, 443, false},
	} {
		if got := must(tc.entry).Match(tc.name, tc.port, tc.def); got != tc.want {
			t.Errorf("%q.Match(%q, %d, %d) = %v, want %v", tc.entry, tc.name, tc.port, tc.def, got, tc.want)
		}
	}
	for _, bad := range []string{"*.com", "*", "*.*.a.com", "a.*.com", "a.com:0", "a.com:99999", "a.com:08", "exa_mple.com", "ünï.com", "*.10.0.0.1"} {
		if h, err := ParseHost(bad); err == nil {
			t.Errorf("ParseHost(%q) = %+v, want an error", bad, h)
		}
	}
}

func TestHostOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"api.a.com", "api.a.com", true},
		{"api.a.com", "API.a.com.", true},
		{"api.a.com", "api.a.com:443", true},
		{"api.a.com", "api.a.com:80", true},
		{"api.a.com", "api.a.com:8443", false},
		{"*.a.com", "api.a.com", true},
		{"api.a.com", "*.a.com", true},
		{"*.a.com", "a.com", false},
		{"*.a.com", "x.y.a.com", false},
		{"*.a.com", "*.a.com:8443", false},
		{"*.a.com", "*.b.com", false},
	} {
		a, _ := ParseHost(tc.a)
		b, _ := ParseHost(tc.b)
		if got := a.Overlaps(b); got != tc.want {
			t.Errorf("%q overlaps %q = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSpecialAddress(t *testing.T) {
	for in, special := range map[string]bool{
		"169.254.169.254": true, "fd00:ec2::254": true, "127.0.0.1": true, "::1": true, "10.1.2.3": true,
		"172.16.0.1": true, "192.168.1.1": true, "fc00::1": true, "100.64.0.1": true, "fe80::1": true,
		"0.0.0.0": true, "::": true, "224.0.0.1": true, "8.8.8.8": false, "2606:4700::1111": false,
		"::ffff:127.0.0.1": true,
	} {
		if got := SpecialAddress(netip.MustParseAddr(in)) != ""; got != special {
			t.Errorf("SpecialAddress(%s) special = %v, want %v", in, got, special)
		}
	}
}
