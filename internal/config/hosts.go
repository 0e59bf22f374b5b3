package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// hosts are the upstream's configured hosts, or (explicit false) the host
// of its base URL (none when that is not a canonical host name or address);
// for an aws upstream, the names the stock SDKs and CLI use for its service
// and region (upstream.AWS.Hosts), whatever its endpoint. A configured
// host that does not parse is an error, and left out.
func (u *Upstream) hosts(f string) (hs []upstream.Host, explicit bool, err error) {
	var e errs
	switch {
	case len(u.Hosts) > 0:
		for j, s := range u.Hosts {
			h, err := upstream.ParseHost(s)
			if err != nil {
				e.add(fmt.Sprintf("%s.hosts[%d]", f, j), "%q: %v (a host name, *.domain, or an IP address, optionally :port; ASCII only)", truncateField(s), err)
				continue
			}
			hs = append(hs, h)
		}
		return hs, true, e.err()
	case u.Type == "aws":
		if !serviceRE.MatchString(u.Service) || !regionRE.MatchString(u.Region) {
			return nil, false, nil // said by validateAWS
		}
		for _, s := range (&upstream.AWS{Service: u.Service, Region: u.Region}).Hosts() {
			h, err := upstream.ParseHost(s)
			if err != nil {
				e.add(f, "the AWS host %q: %v", s, err)
				continue
			}
			hs = append(hs, h)
		}
		return hs, false, e.err()
	}
	bu, err := url.Parse(u.BaseURL)
	if err != nil {
		return nil, false, nil
	}
	entry := bu.Hostname()
	if p := bu.Port(); p != "" && !(bu.Scheme == "https" && p == "443" || bu.Scheme == "http" && p == "80") {
		entry = net.JoinHostPort(entry, p)
	}
	h, err := upstream.ParseHost(entry)
	if err != nil {
		return nil, false, nil
	}
	return []upstream.Host{h}, false, nil
}

func truncateField(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// hostClaim is a host upstream i maps to the proxy door.
type hostClaim struct {
	h upstream.Host
	i int
}

// validateHosts resolves every upstream's proxy hosts. A destination two
// upstreams list in hosts is an error (the proxy door could not tell which
// credential it means). A default (the base URL's host) that another
// upstream lists, or that is also another upstream's default, maps to none
// of them: name it in hosts.
func (c *Config) validateHosts() error {
	var e errs
	var explicit, defaults []hostClaim
	for i := range c.Upstreams {
		f := fmt.Sprintf("upstreams[%d]", i)
		hs, isExplicit, err := c.Upstreams[i].hosts(f)
		e.join(err)
		if !isExplicit {
			for _, h := range hs {
				defaults = append(defaults, hostClaim{h, i})
			}
			continue
		}
		for j, h := range hs {
			if err := c.claim(explicit, hostClaim{h, i}, fmt.Sprintf("%s.hosts[%d]", f, j)); err != nil {
				e.join(err)
				continue
			}
			explicit = append(explicit, hostClaim{h, i})
		}
	}
	for i := range c.Upstreams {
		c.Upstreams[i].proxyHosts = nil
	}
	for _, x := range explicit {
		u := &c.Upstreams[x.i]
		u.proxyHosts = append(u.proxyHosts, x.h)
	}
	for _, d := range defaults {
		ambiguous := false
		for _, o := range append(explicit, defaults...) {
			if o.i != d.i && o.h.Overlaps(d.h) {
				ambiguous = true
			}
		}
		if !ambiguous {
			u := &c.Upstreams[d.i]
			u.proxyHosts = append(u.proxyHosts, d.h)
		}
	}
	return e.err()
}

// claim refuses a host (at field f) that overlaps one already listed.
func (c *Config) claim(listed []hostClaim, x hostClaim, f string) error {
	for _, o := range listed {
		if !o.h.Overlaps(x.h) {
			continue
		}
		if o.i == x.i {
			return fieldErr(f, "%s is listed twice", x.h)
		}
		return fieldErr(f, "%s is also a host of upstream %q: a host belongs to one upstream", x.h, c.Upstreams[o.i].Name)
	}
	return nil
}

// caPool reads a PEM file of CA certificates.
func caPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.New("cannot read the file")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}
