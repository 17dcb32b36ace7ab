package agent

import (
	"io"
	"net"

	"github.com/hashicorp/yamux"

	"github.com/space-sandbox/space/internal/errdefs"
)

// uploadReader reads the raw bytes of an upload from st. yamux ends a
// stream with EOF also when its whole link died, which would make a cut-off
// upload look complete; a link that is gone at EOF is a failed upload.
func uploadReader(st net.Conn) io.Reader {
	ys, ok := st.(*yamux.Stream)
	if !ok {
		return st
	}
	return &linkEOFReader{st: ys}
}

type linkEOFReader struct{ st *yamux.Stream }

func (r *linkEOFReader) Read(p []byte) (int, error) {
	n, err := r.st.Read(p)
	if err == io.EOF && r.st.Session().IsClosed() {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// exactly makes a reader of an upload announced as size bytes (0: unknown)
// fail, instead of ending, when the stream ends short or runs long, so the
// partial file is removed rather than kept.
func exactly(r io.Reader, size int64) io.Reader {
	if size <= 0 {
		return r
	}
	return &sizedReader{r: r, left: size}
}

type sizedReader struct {
	r    io.Reader
	left int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.left -= int64(n)
	switch {
	case s.left < 0:
		return n, errdefs.New(errdefs.ErrInvalidArgument, "upload is longer than its announced size")
	case err == io.EOF && s.left > 0:
		return n, errdefs.New(errdefs.ErrAborted, "upload ended %d bytes short of its announced size", s.left)
	}
	return n, err
}
