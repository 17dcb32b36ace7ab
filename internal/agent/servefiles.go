package agent

import (
	"io"
	"net"

	"github.com/hashicorp/yamux"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

func (a *Agent) dispatchFile(st net.Conn, req *agentproto.Request) error {
	switch req.Op {
	case agentproto.OpReadFile:
		var r agentproto.PathRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		f, info, err := a.files.open(r.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := reply(st, info, nil); err != nil {
			return nil
		}
		_, _ = io.Copy(st, f)
		return nil
	case agentproto.OpWriteFile:
		var r agentproto.WriteFileRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		info, err := a.files.write(r.Path, r.Mode, exactly(uploadReader(st), r.Size))
		if err != nil {
			return err
		}
		return reply(st, info, nil)
	case agentproto.OpListDir:
		var r agentproto.PathRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		entries, err := a.files.list(r.Path)
		if err != nil {
			return err
		}
		return reply(st, agentproto.DirList{Entries: entries}, nil)
	case agentproto.OpStat:
		var r agentproto.PathRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		info, err := a.files.stat(r.Path)
		if err != nil {
			return err
		}
		return reply(st, info, nil)
	case agentproto.OpDelete:
		var r agentproto.DeleteRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		if err := a.files.remove(r.Path, r.Recursive); err != nil {
			return err
		}
		return reply(st, nil, nil)
	case agentproto.OpTarOut:
		var r agentproto.PathRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		answered := false
		err := a.files.tarOut(r.Path, st, func() error { answered = true; return reply(st, nil, nil) })
		if err != nil && !answered {
			return err
		}
		if err != nil {
			a.log.Warn("tar out", "path", r.Path, "err", err)
		}
		return nil
	case agentproto.OpTarIn:
		var r agentproto.PathRequest
		if err := decode(req, &r); err != nil {
			return err
		}
		if err := a.files.tarIn(r.Path, uploadReader(st)); err != nil {
			return err
		}
		return reply(st, nil, nil)
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "unknown operation %q", req.Op)
}

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
