package agentclient

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// Ping returns the agent's Info.
func (c *Client) Ping(ctx context.Context) (agentproto.Info, error) {
	var info agentproto.Info
	err := c.do(ctx, agentproto.OpPing, nil, &info)
	return info, err
}

// WaitReady pings until the agent answers or ctx is done.
func (c *Client) WaitReady(ctx context.Context) (agentproto.Info, error) {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := c.Ping(attempt)
		cancel()
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, errdefs.ErrDeadlineExceeded) {
			return info, err
		}
		if ctx.Err() != nil {
			return info, linkError("wait for agent", ctx, err)
		}
		c.Disconnect()
		select {
		case <-ctx.Done():
			return info, linkError("wait for agent", ctx, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Configure hands the agent its identity.
func (c *Client) Configure(ctx context.Context, cfg agentproto.Configure) error {
	return c.do(ctx, agentproto.OpConfigure, cfg, nil)
}

// Start starts a process.
func (c *Client) Start(ctx context.Context, spec agentproto.ProcessSpec) (agentproto.ProcessInfo, error) {
	var info agentproto.ProcessInfo
	err := c.do(ctx, agentproto.OpStart, spec, &info)
	return info, err
}

// Get describes one process.
func (c *Client) Get(ctx context.Context, id string) (agentproto.ProcessInfo, error) {
	var info agentproto.ProcessInfo
	err := c.do(ctx, agentproto.OpGet, agentproto.ProcessRef{ID: id}, &info)
	return info, err
}

// List describes every process the agent remembers.
func (c *Client) List(ctx context.Context) ([]agentproto.ProcessInfo, error) {
	var l agentproto.ProcessList
	err := c.do(ctx, agentproto.OpList, nil, &l)
	return l.Processes, err
}

// Stdin writes data to a process's stdin (in chunks of at most
// agentproto.MaxStdinChunk) and then closes it when eof is set.
func (c *Client) Stdin(ctx context.Context, id string, data []byte, eof bool) error {
	for {
		chunk := data
		if len(chunk) > agentproto.MaxStdinChunk {
			chunk = chunk[:agentproto.MaxStdinChunk]
		}
		data = data[len(chunk):]
		last := len(data) == 0
		if err := c.do(ctx, agentproto.OpStdin, agentproto.StdinRequest{ID: id, Data: chunk, EOF: eof && last}, nil); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// Signal sends sig ("SIGTERM", "KILL", "9", ...) to the process group.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	return c.do(ctx, agentproto.OpSignal, agentproto.SignalRequest{ID: id, Signal: sig}, nil)
}

// Resize resizes a process's PTY.
func (c *Client) Resize(ctx context.Context, id string, rows, cols uint16) error {
	return c.do(ctx, agentproto.OpResize, agentproto.ResizeRequest{ID: id, Rows: rows, Cols: cols}, nil)
}

// Freeze quiesces the guest filesystem before a snapshot.
func (c *Client) Freeze(ctx context.Context) error {
	return c.do(ctx, agentproto.OpFreeze, nil, nil)
}

// Thaw undoes Freeze.
func (c *Client) Thaw(ctx context.Context) error {
	return c.do(ctx, agentproto.OpThaw, nil, nil)
}

// Stat describes path (a symlink as itself).
func (c *Client) Stat(ctx context.Context, path string) (agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	err := c.do(ctx, agentproto.OpStat, agentproto.PathRequest{Path: path}, &info)
	return info, err
}

// ListDir lists a directory, sorted by name.
func (c *Client) ListDir(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	var l agentproto.DirList
	err := c.do(ctx, agentproto.OpListDir, agentproto.PathRequest{Path: path}, &l)
	return l.Entries, err
}

// Delete removes path; a non-empty directory needs recursive.
func (c *Client) Delete(ctx context.Context, path string, recursive bool) error {
	return c.do(ctx, agentproto.OpDelete, agentproto.DeleteRequest{Path: path, Recursive: recursive}, nil)
}

// ReadFile opens a guest file. The caller must Close the reader; ctx bounds
// the whole transfer.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	cl, err := c.open(ctx, agentproto.OpReadFile, agentproto.PathRequest{Path: path})
	if err != nil {
		return nil, info, err
	}
	if err := cl.responseWithin(agentproto.OpReadFile, &info, c.bound(agentproto.OpReadFile)); err != nil {
		cl.Close()
		return nil, info, err
	}
	return &rawReader{cl: cl}, info, nil
}

// TarOut streams the guest directory path as a tar archive. The caller must
// Close the reader.
func (c *Client) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	cl, err := c.open(ctx, agentproto.OpTarOut, agentproto.PathRequest{Path: path})
	if err != nil {
		return nil, err
	}
	if err := cl.responseWithin(agentproto.OpTarOut, nil, c.bound(agentproto.OpTarOut)); err != nil {
		cl.Close()
		return nil, err
	}
	return &rawReader{cl: cl}, nil
}

// WriteFile writes r to path (parents created; mode 0 means 0644). size,
// when above 0, is how many bytes r holds: if r ends early or fails, the
// agent discards what it received instead of keeping a truncated file.
// With size 0 (unknown) the file ends where r ends.
func (c *Client) WriteFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) (agentproto.FileInfo, error) {
	var info agentproto.FileInfo
	req := agentproto.WriteFileRequest{Path: path, Mode: mode, Size: max(size, 0)}
	err := c.upload(ctx, agentproto.OpWriteFile, req, r, &info)
	return info, err
}

// TarIn unpacks the tar stream r under the guest directory path.
func (c *Client) TarIn(ctx context.Context, path string, r io.Reader) error {
	return c.upload(ctx, agentproto.OpTarIn, agentproto.PathRequest{Path: path}, r, nil)
}

// upload sends raw bytes after the request and reads the response, which
// may come early (an error) while the upload is still running.
func (c *Client) upload(ctx context.Context, op agentproto.Op, args any, r io.Reader, out any) error {
	cl, err := c.open(ctx, op, args)
	if err != nil {
		return err
	}
	defer cl.Close()
	copyErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(cl.st, r)
		if err == nil {
			err = cl.st.Close() // half-close: the end of the data
		}
		if err != nil {
			_ = cl.st.SetDeadline(time.Now()) // the agent would wait forever
		}
		copyErr <- err
	}()
	respErr := cl.response(op, out)
	if respErr != nil {
		_ = cl.st.SetWriteDeadline(time.Now()) // stop the upload
	}
	cerr := <-copyErr
	var pub *errdefs.Public
	if respErr != nil && (errors.As(respErr, &pub) || cerr == nil) {
		return respErr // the agent's answer, or a link failure
	}
	if cerr != nil {
		return linkError(string(op), ctx, cerr)
	}
	return respErr
}
