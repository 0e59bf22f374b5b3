package upstream

import (
	"strings"
)

// AWS host names, for the HTTPS_PROXY door (DESIGN §8): the stock SDKs and
// CLI reach the real AWS host of a service and region, with no endpoint
// override; an aws upstream answers for the names they build, whatever its
// configured endpoint, and a request to one of them is mapped to the
// request the operation map checks.
//
// The names are those aws-sdk-go-v2's endpoint rules build (checked against
// service/s3 v1.114 and service/sts v1.52):
//
//	S3, region r          s3.r.amazonaws.com                    <bucket>.s3.r.amazonaws.com
//	  dual-stack          s3.dualstack.r.amazonaws.com          <bucket>.s3.dualstack.r.amazonaws.com
//	  FIPS                s3-fips.r.amazonaws.com               <bucket>.s3-fips.r.amazonaws.com
//	  FIPS, dual-stack    s3-fips.dualstack.r.amazonaws.com     <bucket>.s3-fips.dualstack.r.amazonaws.com
//	  us-east-1 global    s3.amazonaws.com                      <bucket>.s3.amazonaws.com
//	other services        svc.r.amazonaws.com, svc-fips.r.amazonaws.com,
//	                      svc.r.api.aws, svc-fips.r.api.aws (dual-stack),
//	                      svc.amazonaws.com (us-east-1: the global endpoints of IAM, STS, ...)
//
// China's regions (cn-*) end in amazonaws.com.cn, their dual-stack names
// in api.amazonwebservices.com.cn. The SDK addresses a bucket by its host
// (virtual-hosted) when its name is a DNS label, and by the path
// (s3.r.amazonaws.com/<bucket>/...) otherwise, dotted names included.
// Not mapped: S3 Transfer Acceleration (bucket.s3-accelerate.amazonaws.com,
// not bound to a region), access points, Outposts, S3 Express and the
// legacy s3-<region>.amazonaws.com names; an upstream whose service is
// reached by another name (SES's email.<region>) lists it in `hosts`.

// s3HostPrefixes are the labels before the region in S3's names.
var s3HostPrefixes = [...]string{"s3", "s3.dualstack", "s3-fips", "s3-fips.dualstack"}

// partitionSuffixes are the DNS suffixes of a region's partition: its
// regular names and its dual-stack names outside S3.
func partitionSuffixes(region string) (dns, dualStack string) {
	if strings.HasPrefix(region, "cn-") {
		return "amazonaws.com.cn", "api.amazonwebservices.com.cn"
	}
	return "amazonaws.com", "api.aws"
}

// Hosts are the host names the stock SDKs and CLI use for the upstream's
// service and region (see above): the upstream's default `hosts` in proxy
// mode. A name starting "*." stands for any one virtual-hosted bucket label
// (S3 only); MatchHost and PathStyle decide exactly which labels.
func (a *AWS) Hosts() []string {
	dns, dual := partitionSuffixes(a.Region)
	var hosts []string
	if a.S3() {
		var names []string
		for _, p := range s3HostPrefixes {
			names = append(names, p+"."+a.Region+"."+dns)
		}
		if a.Region == "us-east-1" {
			names = append(names, "s3.amazonaws.com")
		}
		for _, n := range names {
			hosts = append(hosts, n, "*."+n)
		}
		return hosts
	}
	for _, svc := range []string{a.Service, a.Service + "-fips"} {
		hosts = append(hosts, svc+"."+a.Region+"."+dns, svc+"."+a.Region+"."+dual)
	}
	if a.Region == "us-east-1" {
		hosts = append(hosts, a.Service+".amazonaws.com")
	}
	return hosts
}

// MatchHost reports whether host (a name without port, as the client
// addressed and signed it) is one of Hosts, with a valid bucket label
// where it has one.
func (a *AWS) MatchHost(host string) bool {
	_, ok := a.hostBucket(host)
	return ok
}

// PathStyle maps a request the client addressed to host (without port)
// with the escaped path escPath to the escaped path below the upstream that
// the operation map checks and the broker sends to the configured endpoint:
// for S3, a virtual-hosted request (Host: bkt.s3.us-east-1.amazonaws.com,
// /key) becomes the path-style one (/bkt/key; "/" becomes /bkt); a
// path-style one, and any other service's, keeps its path. A host that is
// not one of the upstream's names, or whose bucket label is not a
// DNS-compatible bucket name, is an ErrAWSOperation.
func (a *AWS) PathStyle(host, escPath string) (string, error) {
	bucket, ok := a.hostBucket(host)
	if !ok {
		return "", opErr("the host is not one of the upstream's AWS host names, or its bucket label is not a valid bucket name")
	}
	if escPath == "" {
		escPath = "/"
	}
	if escPath[0] != '/' {
		return "", opErr("the path is not absolute")
	}
	if bucket == "" {
		return escPath, nil
	}
	if escPath == "/" {
		return "/" + bucket, nil
	}
	return "/" + bucket + escPath, nil
}

// hostBucket matches host against the upstream's names: ok, and the bucket
// label of a virtual-hosted S3 name ("" for the others). DNS names compare
// without regard to case, but a bucket label must be lower case: S3 reads
// the host in lower case, and the grant must see the bucket S3 serves.
func (a *AWS) hostBucket(host string) (bucket string, ok bool) {
	if host == "" || len(host) > 253 {
		return "", false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return "", false // ports, IPv6 literals, %, _, NUL, spaces...
		}
	}
	dns, dual := partitionSuffixes(a.Region)
	if a.S3() {
		if head, ok := cutDomain(host, dns); ok {
			if a.Region == "us-east-1" && strings.EqualFold(head, "s3") {
				return "", true
			}
			if label, ok := cutDomain(head, "s3"); ok && a.Region == "us-east-1" {
				return label, virtualBucket(label)
			}
			if head, ok := cutDomain(head, a.Region); ok {
				for _, p := range s3HostPrefixes {
					if strings.EqualFold(head, p) {
						return "", true
					}
				}
				for _, p := range s3HostPrefixes {
					if label, ok := cutDomain(head, p); ok {
						return label, virtualBucket(label)
					}
				}
			}
		}
		return "", false
	}
	for _, sfx := range [...]string{dns, dual} {
		if head, ok := cutDomain(host, sfx); ok {
			if head, ok := cutDomain(head, a.Region); ok {
				if strings.EqualFold(head, a.Service) || len(head) == len(a.Service)+5 &&
					strings.EqualFold(head[:len(a.Service)], a.Service) && strings.EqualFold(head[len(a.Service):], "-fips") {
					return "", true
				}
			}
		}
	}
	if a.Region == "us-east-1" {
		if head, ok := cutDomain(host, "amazonaws.com"); ok && strings.EqualFold(head, a.Service) {
			return "", true
		}
	}
	return "", false
}

// cutDomain cuts "."+suffix (any case) off s, leaving a non-empty head.
func cutDomain(s, suffix string) (string, bool) {
	n := len(s) - len(suffix) - 1
	if n < 1 || s[n] != '.' || !strings.EqualFold(s[n+1:], suffix) {
		return "", false
	}
	return s[:n], true
}

// virtualBucket accepts a bucket name that S3 serves by host: one DNS
// label of 3 to 63 lower-case letters, digits and hyphens, beginning and
// ending with a letter or digit, and no IDN ("xn--") name, which reads as
// another name once decoded. Dotted names are addressed by path.
func virtualBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 || strings.HasPrefix(b, "xn--") {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(b)-1:
		default:
			return false
		}
	}
	return true
}
