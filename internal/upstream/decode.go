package upstream

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strings"
)

// decodeResponse makes resp's body something the broker can scrub: its
// content without any coding. One gzip (x-gzip) or deflate coding is
// decoded, and the answer goes on decoded, without Content-Encoding and
// Content-Length. Anything else is ErrUpstream and the answer is never
// passed on: several codings (in one header line or several, identity
// among them or not) and codings the broker cannot decode (br, zstd,
// compress, ...). An absent, empty or identity coding leaves the body as
// it is.
func decodeResponse(resp *http.Response) error {
	vs := resp.Header.Values("Content-Encoding")
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > 1 || strings.Contains(vs[0], ",") {
		return ErrSeveralEncodings
	}
	var open func(*bufio.Reader) (io.Reader, error)
	switch strings.ToLower(strings.TrimSpace(vs[0])) {
	case "", "identity":
		resp.Header.Del("Content-Encoding")
		return nil
	case "gzip", "x-gzip":
		open = func(r *bufio.Reader) (io.Reader, error) { return gzip.NewReader(r) }
	case "deflate":
		open = openDeflate
	default:
		return ErrUnknownEncoding
	}
	resp.Body = &decodedBody{body: resp.Body, open: open}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	return nil
}

// openDeflate reads HTTP's deflate, which is zlib (RFC 9110), or the raw
// deflate some servers send instead.
func openDeflate(r *bufio.Reader) (io.Reader, error) {
	if h, err := r.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
		return zlib.NewReader(r)
	}
	return flate.NewReader(r), nil
}

// decodedBody decodes an answer's body as it is read. The decoder starts
// at the first Read (a decoder reads its header at once, and an empty
// body, as answers to HEAD or 204 have, decodes to nothing).
type decodedBody struct {
	body io.ReadCloser
	open func(*bufio.Reader) (io.Reader, error)
	dec  io.Reader
	err  error
}

func (d *decodedBody) Read(p []byte) (int, error) {
	if d.dec == nil && d.err == nil {
		br := bufio.NewReader(d.body)
		if _, err := br.Peek(1); err != nil {
			d.err = err // io.EOF: empty
		} else if d.dec, err = d.open(br); err != nil {
			d.err = ErrUndecodable
		}
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.dec.Read(p)
}

func (d *decodedBody) Close() error { return d.body.Close() }
