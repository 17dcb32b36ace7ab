package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-sandbox/space/internal/api/apitest"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/worker"
	"github.com/space-sandbox/space/internal/worker/remote"
	"github.com/space-sandbox/space/internal/workerpb"
	"github.com/space-sandbox/space/internal/workerpb/workerpbconnect"
)

// h2cClient is a bare HTTP/2 (h2c) client, for calls the protocol's own
// client would never make.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 30 * time.Second}
}

// headerInterceptor sets Authorization to a fixed value (or drops it).
type headerInterceptor struct{ value string }

func (h headerInterceptor) set(hdr http.Header) {
	if h.value == "" {
		hdr.Del("Authorization")
	} else {
		hdr.Set("Authorization", h.value)
	}
}

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Calls without the right token are refused before they reach the worker:
// Unauthenticated and nothing else (no details, no hint of the token), a
// log line naming the reason and never either token.
func TestAuthRefused(t *testing.T) {
	fw := apitest.NewWorker(t)
	good := newToken(t)
	s := serve(t, fw, good)
	ctx := timeout(t, time.Minute)
	// A sandbox exists, so a refused call could name it if it leaked.
	c := s.client(t, good)
	if _, err := c.CreateSandbox(ctx, worker.SandboxSpec{ID: "sbx_auth", Template: "base", VCPUs: 1, MemoryMiB: 256}); err != nil {
		t.Fatal(err)
	}
	// A port in the "guest" (the host, for this worker), which a refused
	// DialPort must not reach.
	dialled := make(chan struct{}, 1)
	port := listen(t, func(net.Conn) { dialled <- struct{}{} })
	wrong := newToken(t)
	cases := map[string]string{
		"no token":          "",
		"no bearer":         good.Reveal(),
		"wrong token":       "Bearer " + wrong.Reveal(),
		"wrong length":      "Bearer " + good.Reveal()[:20],
		"longer":            "Bearer " + good.Reveal() + "x",
		"other scheme":      "Basic " + good.Reveal(),
		"empty bearer":      "Bearer ",
		"case of bearer":    "bearer " + good.Reveal(),
		"token with spaces": "Bearer  " + good.Reveal(),
	}
	for name, header := range cases {
		t.Run(name, func(t *testing.T) {
			opts := connect.WithInterceptors(headerInterceptor{value: header})
			workers := workerpbconnect.NewWorkerServiceClient(h2cClient(), "http://"+s.addr, opts)
			guests := workerpbconnect.NewGuestServiceClient(h2cClient(), "http://"+s.addr, opts)
			_, err := workers.CreateSandbox(ctx, connect.NewRequest(&workerpb.CreateSandboxRequest{
				Spec: &workerpb.SandboxSpec{Id: "sbx_refused", Template: "base", Vcpus: 1, MemoryMib: 256}}))
			wantRefused(t, "CreateSandbox", err)
			_, err = workers.GetSandbox(ctx, connect.NewRequest(&workerpb.GetSandboxRequest{SandboxId: "sbx_auth"}))
			wantRefused(t, "GetSandbox", err)
			events, err := guests.StreamEvents(ctx, connect.NewRequest(&workerpb.StreamEventsRequest{SandboxId: "sbx_auth", ProcessId: "p"}))
			if err == nil {
				if events.Receive() {
					t.Errorf("StreamEvents sent %v", events.Msg())
				}
				err = events.Err()
				events.Close()
			}
			wantRefused(t, "StreamEvents", err)
			up := guests.WriteFile(ctx)
			_ = up.Send(&workerpb.WriteFileRequest{Kind: &workerpb.WriteFileRequest_Header{Header: &workerpb.WriteFileHeader{
				SandboxId: "sbx_auth", Path: "/refused"}}})
			_, err = up.CloseAndReceive()
			wantRefused(t, "WriteFile", err)
			dial := guests.DialPort(ctx)
			_ = dial.Send(&workerpb.DialPortRequest{Kind: &workerpb.DialPortRequest_Header{Header: &workerpb.DialPortHeader{
				SandboxId: "sbx_auth", Port: uint32(port)}}})
			_, err = dial.Receive()
			dial.CloseRequest()
			dial.CloseResponse()
			wantRefused(t, "DialPort", err)
		})
	}
	if _, err := fw.Sandbox(ctx, "sbx_refused"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("a refused create reached the worker: %v", err)
	}
	g, err := fw.Agent(ctx, "sbx_auth")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Stat(ctx, "/refused"); errdefs.ClassOf(err) != errdefs.ErrNotFound {
		t.Errorf("a refused upload wrote the file: %v", err)
	}
	select {
	case <-dialled:
		t.Error("a refused DialPort reached the guest's port")
	default:
	}

	// The protocol's own client with a wrong token gets the class.
	_, err = s.client(t, wrong).Sandbox(ctx, "sbx_auth")
	if errdefs.ClassOf(err) != errdefs.ErrUnauthenticated {
		t.Errorf("client with a wrong token: %v, want unauthenticated", err)
	}

	// A raw request reads nothing but the refusal.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+workerpbconnect.WorkerServiceGetSandboxProcedure,
		strings.NewReader(`{"sandboxId":"sbx_auth"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+wrong.Reveal())
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.TrimSpace(string(body)) != `{"code":"unauthenticated","message":"unauthenticated"}` {
		t.Errorf("raw refusal: %d %s", resp.StatusCode, body)
	}

	logs := s.log.String()
	if n := strings.Count(logs, "refused a worker protocol call"); n < len(cases)*5 {
		t.Errorf("%d refusals logged, want at least %d:\n%s", n, len(cases)*5, logs)
	}
	for _, secret := range []string{good.Reveal(), wrong.Reveal(), good.Reveal()[:20]} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds a token:\n%s", logs)
		}
	}
	if !strings.Contains(logs, "reason=missing") || !strings.Contains(logs, "reason=wrong") {
		t.Errorf("the log does not say why:\n%s", logs)
	}
}

func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Errorf("%s: %v, want a refusal", what, err)
		return
	}
	if ce.Code() != connect.CodeUnauthenticated || ce.Message() != "unauthenticated" || len(ce.Details()) != 0 {
		t.Errorf("%s: code %v, message %q, %d details; want unauthenticated only", what, ce.Code(), ce.Message(), len(ce.Details()))
	}
}

// A server or client refuses a token too short to be one, and a Token
// never prints its secret.
func TestTokenRules(t *testing.T) {
	for _, bad := range []string{"", "short", strings.Repeat("a", 31), strings.Repeat("a", 32) + " b"} {
		if _, err := remote.NewToken(bad); err == nil {
			t.Errorf("NewToken(%q) accepted", bad)
		}
	}
	if _, err := remote.NewServer(remote.ServerConfig{Worker: apitest.NewWorker(t)}); err == nil {
		t.Error("NewServer without a token accepted")
	}
	if _, err := remote.NewClient(remote.ClientConfig{Address: "127.0.0.1:1"}); err == nil {
		t.Error("NewClient without a token accepted")
	}
	tok := newToken(t)
	var buf bytes.Buffer
	cfg := remote.ServerConfig{Token: tok}
	fmt.Fprintf(&buf, "%v %+v %#v %s %v %+v %#v", tok, tok, tok, tok, cfg, cfg, cfg)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("token", "token", tok, "cfg", cfg)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("token", "token", tok)
	if strings.Contains(buf.String(), tok.Reveal()) {
		t.Errorf("a Token printed its secret: %s", buf.String())
	}
}
