package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/workerpb"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// An upload out of order (no header, a chunk first, a header where a chunk
// belongs) is the caller's mistake, said as such, on both upload calls, and
// writes nothing.
func TestMalformedUploads(t *testing.T) {
	fw := apitest.NewWorker(t)
	tok := newToken(t)
	s := serve(t, fw, tok)
	ctx := timeout(t, time.Minute)
	if _, err := s.client(t, tok).CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_up", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	guests := workerpbconnect.NewGuestServiceClient(h2cClient(), "http://"+s.addr,
		connect.WithInterceptors(headerInterceptor{value: "Bearer " + tok.Reveal()}))
	fileHeader := &workerpb.WriteFileRequest{Kind: &workerpb.WriteFileRequest_Header{Header: &workerpb.WriteFileHeader{
		SandboxId: "sbx_up", Path: "/up", Mode: 0o644, Size: 1}}}
	fileChunk := &workerpb.WriteFileRequest{Kind: &workerpb.WriteFileRequest_Chunk{Chunk: []byte("x")}}
	tarHeader := &workerpb.TarInRequest{Kind: &workerpb.TarInRequest_Header{Header: &workerpb.TarInHeader{SandboxId: "sbx_up", Path: "/"}}}
	tarChunk := &workerpb.TarInRequest{Kind: &workerpb.TarInRequest_Chunk{Chunk: []byte("x")}}
	for _, c := range []struct {
		name, want string
		file       []*workerpb.WriteFileRequest
		tar        []*workerpb.TarInRequest
	}{
		{name: "file without messages", want: "upload: no header"},
		{name: "file chunk first", want: "the first message must be the header", file: []*workerpb.WriteFileRequest{fileChunk}},
		{name: "file header twice", want: "expected a chunk after the header", file: []*workerpb.WriteFileRequest{fileHeader, fileHeader}},
		{name: "tar without messages", want: "upload: no header", tar: []*workerpb.TarInRequest{}},
		{name: "tar chunk first", want: "the first message must be the header", tar: []*workerpb.TarInRequest{tarChunk}},
		{name: "tar header twice", want: "expected a chunk after the header", tar: []*workerpb.TarInRequest{tarHeader, tarHeader}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.tar != nil {
				up := guests.TarIn(ctx)
				for _, m := range c.tar {
					_ = up.Send(m)
				}
				_, err = up.CloseAndReceive()
			} else {
				up := guests.WriteFile(ctx)
				for _, m := range c.file {
					_ = up.Send(m)
				}
				_, err = up.CloseAndReceive()
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), c.want) {
				t.Errorf("got %v, want invalid argument %q", err, c.want)
			}
		})
	}
	g, err := fw.Agent(ctx, "sbx_up")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Stat(ctx, "/up"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("a malformed upload wrote the file: %v", err)
	}
}
