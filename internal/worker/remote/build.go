package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/template"
	"github.com/space-sandbox/space/internal/workerpb"
)

// TemplateBuild is one BuildTemplate call: a template build request
// (admin: setup scripts allowed), or the platform's base template.
type TemplateBuild struct {
	Request template.BuildRequest
	Admin   bool
	Base    bool
	// SourceObject, when set, is the object-storage snapshot holding the
	// source file, read in place of Request.Source.Path.
	SourceObject string
	// RegistryAllow is the control plane's registry allow-list for oci
	// image pulls.
	RegistryAllow []string
}

// TemplateBuilder builds templates on a worker and publishes each build
// where every worker finds it by digest before it returns.
type TemplateBuilder interface {
	BuildTemplate(ctx context.Context, b TemplateBuild, progress template.ProgressFunc, log io.Writer) (template.Metadata, error)
}

// maxLogChunk bounds the build log one message carries.
const maxLogChunk = 64 << 10

// BuildTemplate serves a build: progress and the log as they come, then
// the metadata.
func (h workerService) BuildTemplate(ctx context.Context, req *connect.Request[workerpb.BuildTemplateRequest], stream *connect.ServerStream[workerpb.BuildTemplateResponse]) error {
	if h.s.templates == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this worker builds no templates")
	}
	b := TemplateBuild{Admin: req.Msg.GetAdmin(), Base: req.Msg.GetBase(), SourceObject: req.Msg.GetSourceObject(),
		RegistryAllow: req.Msg.GetRegistryAllow()}
	if !b.Base {
		if err := json.Unmarshal(req.Msg.GetRequest(), &b.Request); err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "the build request is not a template build request")
		}
	}
	var mu sync.Mutex
	var sendErr error
	send := func(m *workerpb.BuildTemplateResponse) {
		mu.Lock()
		defer mu.Unlock()
		if sendErr == nil {
			sendErr = stream.Send(m)
		}
	}
	progress := func(step string, percent int) {
		send(&workerpb.BuildTemplateResponse{Event: &workerpb.BuildTemplateResponse_Progress{
			Progress: &workerpb.BuildProgress{Step: step, Percent: int64(percent)}}})
	}
	logw := writerFunc(func(p []byte) (int, error) {
		for rest := p; len(rest) > 0; {
			n := min(len(rest), maxLogChunk)
			send(&workerpb.BuildTemplateResponse{Event: &workerpb.BuildTemplateResponse_Log{Log: append([]byte(nil), rest[:n]...)}})
			rest = rest[n:]
		}
		return len(p), nil
	})
	m, err := h.s.templates.BuildTemplate(ctx, b, progress, logw)
	if err != nil {
		return err
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode template metadata: %w", errors.Join(errdefs.ErrInternal, err))
	}
	send(&workerpb.BuildTemplateResponse{Event: &workerpb.BuildTemplateResponse_Metadata{Metadata: meta}})
	mu.Lock()
	defer mu.Unlock()
	if sendErr != nil {
		return fmt.Errorf("send build events: %w", errors.Join(errdefs.ErrUnavailable, sendErr))
	}
	return nil
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// BuildTemplate builds b on the worker, passing its progress and log on
// (either may be nil), and returns the build's metadata. The build is not
// retried on a broken link: the caller decides (a build from the same
// inputs is found at once on a retry).
func (c *Client) BuildTemplate(ctx context.Context, b TemplateBuild, progress template.ProgressFunc, log io.Writer) (template.Metadata, error) {
	msg := &workerpb.BuildTemplateRequest{Admin: b.Admin, Base: b.Base, SourceObject: b.SourceObject,
		RegistryAllow: b.RegistryAllow}
	if !b.Base {
		req, err := json.Marshal(b.Request)
		if err != nil {
			return template.Metadata{}, fmt.Errorf("encode build request: %w", errors.Join(errdefs.ErrInvalidArgument, err))
		}
		msg.Request = req
	}
	stream, err := c.workers.BuildTemplate(ctx, connect.NewRequest(msg))
	if err != nil {
		return template.Metadata{}, fromWire(ctx, "build template", err)
	}
	defer stream.Close()
	var meta []byte
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *workerpb.BuildTemplateResponse_Progress:
			if progress != nil {
				progress(ev.Progress.GetStep(), int(ev.Progress.GetPercent()))
			}
		case *workerpb.BuildTemplateResponse_Log:
			if log != nil {
				_, _ = log.Write(ev.Log)
			}
		case *workerpb.BuildTemplateResponse_Metadata:
			meta = ev.Metadata
		}
	}
	if err := stream.Err(); err != nil {
		return template.Metadata{}, fromWire(ctx, "build template", err)
	}
	if meta == nil {
		return template.Metadata{}, protocolError("build template", "the build ended without its metadata")
	}
	var m template.Metadata
	if err := json.Unmarshal(meta, &m); err != nil {
		return template.Metadata{}, protocolError("build template", "the metadata is not template metadata")
	}
	return m, nil
}
