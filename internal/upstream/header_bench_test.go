package upstream

import (
	"net/http"
	"testing"
)

// BenchmarkResponseHeader is the copy of an upstream's answer headers for
// the sandbox, for an answer with the headers a large API sends (GitHub's,
// 17 names): every value scrubbed, hop-by-hop ones and cookies dropped.
func BenchmarkResponseHeader(b *testing.B) {
	src := http.Header{
		"Date": {"Fri, 04 Dec 2026 18:00:00 GMT"}, "Content-Type": {"application/json; charset=utf-8"},
		"Content-Length": {"5123"}, "Cache-Control": {"private, max-age=60, s-maxage=60"},
		"Vary": {"Accept, Authorization, Cookie, X-GitHub-OTP", "Accept-Encoding, Accept, X-Requested-With"},
		"Etag": {`W/"7c2b1f0e9a"`}, "Last-Modified": {"Thu, 03 Dec 2026 10:00:00 GMT"},
		"X-Oauth-Scopes": {"repo"}, "X-Accepted-Oauth-Scopes": {"repo"}, "X-Github-Media-Type": {"github.v3; format=json"},
		"X-Github-Api-Version-Selected": {"2022-11-28"}, "X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"4999"},
		"X-Ratelimit-Reset": {"1764874800"}, "X-Ratelimit-Used": {"1"}, "X-Ratelimit-Resource": {"core"},
		"Access-Control-Expose-Headers": {"ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit"},
		"Strict-Transport-Security":     {"max-age=31536000; includeSubdomains; preload"}, "X-Github-Request-Id": {"C0DE:1234:5678AB:9ABCDE:674F1A00"},
	}
	s := NewScrubber("CANARY-bench-secret")
	b.ReportAllocs()
	for b.Loop() {
		dst := make(http.Header, len(src)+2)
		ResponseHeader(dst, src, s)
	}
}
