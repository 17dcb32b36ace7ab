package egress

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/url"
)

// scrubber masks credential values (and their common encodings) in what an
// upstream sends back, so an endpoint that echoes request headers cannot
// hand the guest the secret. Masks keep the length, so Content-Length stays
// right.
type scrubber struct {
	pats [][]byte
	max  int
}

func newScrubber(secrets []string) *scrubber {
	seen := map[string]bool{}
	s := &scrubber{}
	for _, v := range secrets {
		if v == "" {
			continue
		}
		for _, p := range []string{
			v,
			base64.StdEncoding.EncodeToString([]byte(v)),
			base64.RawStdEncoding.EncodeToString([]byte(v)),
			base64.URLEncoding.EncodeToString([]byte(v)),
			url.QueryEscape(v),
			url.PathEscape(v),
		} {
			if !seen[p] {
				seen[p] = true
				s.pats = append(s.pats, []byte(p))
				s.max = max(s.max, len(p))
			}
		}
	}
	if len(s.pats) == 0 {
		return nil
	}
	return s
}

func (s *scrubber) mask(b []byte) {
	for _, p := range s.pats {
		for i := 0; ; {
			j := bytes.Index(b[i:], p)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(p); k++ {
				b[k] = '*'
			}
			i += j + len(p)
		}
	}
}

func (s *scrubber) scrubString(v string) string {
	b := []byte(v)
	s.mask(b)
	return string(b)
}

func (s *scrubber) reader(r io.Reader) io.Reader { return &scrubReader{s: s, r: r} }

// scrubReader holds back max-1 bytes so a secret split across reads is
// still whole when it is masked.
type scrubReader struct {
	s        *scrubber
	r        io.Reader
	buf, out []byte
	err      error
}

func (z *scrubReader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.err != nil {
			return 0, z.err
		}
		chunk := make([]byte, 32<<10)
		n, err := z.r.Read(chunk)
		z.buf = append(z.buf, chunk[:n]...)
		if err != nil {
			z.err = err
		}
		z.s.mask(z.buf)
		emit := len(z.buf) - (z.s.max - 1)
		if z.err != nil {
			emit = len(z.buf)
		}
		if emit > 0 {
			z.out = append(z.out[:0], z.buf[:emit]...)
			z.buf = append(z.buf[:0:0], z.buf[emit:]...)
		}
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}
