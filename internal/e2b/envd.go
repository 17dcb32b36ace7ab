package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/auth"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// envdCall is one authorised envd request.
type envdCall struct {
	sandbox string
	who     caller
	user    string // the account to act as (Basic auth user, or defaultUser)
}

// on loads the call's sandbox (as the token's tenant) and runs fn on it,
// logging the call as what.
func (h *Handler) on(ctx context.Context, c *envdCall, what string, fn func(sb *store.Sandbox) error) error {
	start := time.Now()
	p, sb, err := h.load(ctx, c.who, c.sandbox, "")
	if err == nil {
		err = fn(sb)
	}
	h.audit(ctx, what, p, c.sandbox, start, err)
	return err
}

// resolve makes an envd path absolute: relative paths are the user's home's.
func (c *envdCall) resolve(p string) string {
	if p == "" {
		p = "."
	}
	if strings.HasPrefix(p, "~") {
		p = strings.TrimPrefix(strings.TrimPrefix(p, "~"), "/")
	}
	if !path.IsAbs(p) {
		home := defaultHome
		if c.user == "root" {
			home = "/root"
		} else if c.user != defaultUser {
			home = "/home/" + c.user
		}
		p = path.Join(home, p)
	}
	return path.Clean(p)
}

func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(HeaderSandboxID)
	if port := r.Header.Get(HeaderSandboxPort); port != "" && port != EnvdPort {
		h.servePort(w, r, id, port)
		return
	}
	if r.URL.Path == "/health" {
		h.envdHealth(w, r, id)
		return
	}
	rpc := strings.HasPrefix(r.URL.Path, "/process.Process/") || strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/")
	call, err := h.authorizeEnvd(r.Context(), r, id)
	if err != nil {
		if rpc {
			h.rpcFail(w, r, asRPCError(err))
		} else {
			h.writeErr(w, r, err)
		}
		return
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/process.Process/"):
		h.serveProcess(w, r, call, strings.TrimPrefix(r.URL.Path, "/process.Process/"))
	case strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/"):
		h.serveFilesystem(w, r, call, strings.TrimPrefix(r.URL.Path, "/filesystem.Filesystem/"))
	case r.URL.Path == "/files" && r.Method == http.MethodGet:
		h.getFiles(w, r, call)
	case r.URL.Path == "/files" && r.Method == http.MethodPost:
		h.postFiles(w, r, call)
	default:
		writeRESTError(w, http.StatusNotFound, "envd has no %s %s", r.Method, r.URL.Path)
	}
}

// rpcFail answers a Connect error in the form the call expects.
func (h *Handler) rpcFail(w http.ResponseWriter, r *http.Request, e *rpcError) {
	if mediaType(r) == "application/connect+json" {
		newServerStream(w).End(e)
		return
	}
	writeUnaryError(w, e)
}

// envdHealth answers 204 while the sandbox runs and 502 otherwise, as E2B's
// proxy does for a sandbox that is paused or gone (the SDK's isRunning).
func (h *Handler) envdHealth(w http.ResponseWriter, r *http.Request, id string) {
	sb, err := h.sandboxes.GetSandbox(r.Context(), store.AnyTenant, id)
	if err != nil || sb.State != store.SandboxRunning {
		writeRESTError(w, http.StatusBadGateway, "sandbox %q is not running", id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// authorizeEnvd checks the sandbox's access token: only a token issued for
// this sandbox lets a call act, as the sandbox's tenant, on this sandbox.
func (h *Handler) authorizeEnvd(ctx context.Context, r *http.Request, id string) (*envdCall, error) {
	tok := r.Header.Get(HeaderAccessToken)
	if tok == "" || len(tok) > 256 {
		return nil, errorf(http.StatusUnauthorized, "missing or invalid X-Access-Token")
	}
	hash := auth.HashKey(tok)
	t, err := h.tokens.GetEnvdToken(ctx, id, hash)
	if err != nil {
		if errdefs.ClassOf(err) == errdefs.ErrNotFound {
			return nil, errorf(http.StatusUnauthorized, "missing or invalid X-Access-Token")
		}
		return nil, err
	}
	// The lookup went by hash; compare again in constant time.
	if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(hash)) != 1 {
		return nil, errorf(http.StatusUnauthorized, "missing or invalid X-Access-Token")
	}
	user := defaultUser
	if u, ok := basicUser(r.Header.Get("Authorization")); ok {
		user = u
	}
	return &envdCall{sandbox: id, who: caller{principal: &auth.Principal{TenantID: t.TenantID, KeyID: "envd:" + id}}, user: user}, nil
}

// basicUser is the user of E2B's "Authorization: Basic base64(user:)".
func basicUser(h string) (string, bool) {
	scheme, v, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return "", false
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u, u != ""
}

func (h *Handler) getFiles(w http.ResponseWriter, r *http.Request, c *envdCall) {
	if u := r.URL.Query().Get("username"); u != "" {
		c.user = u
	}
	p := c.resolve(r.URL.Query().Get("path"))
	var body io.ReadCloser
	err := h.on(r.Context(), c, "read file", func(sb *store.Sandbox) (err error) {
		body, _, err = h.sandboxes.ReadFile(r.Context(), sb, p)
		return err
	})
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// Headers are gone; a cut-off body is all a client can be told.
		panic(http.ErrAbortHandler)
	}
}

// postFiles writes one file (octet-stream body) or several (multipart
// parts named "file", each naming its path as the filename). The body is
// bounded by cfg.MaxUploadBytes, as /v1's uploads are.
func (h *Handler) postFiles(w http.ResponseWriter, r *http.Request, c *envdCall) {
	if u := r.URL.Query().Get("username"); u != "" {
		c.user = u
	}
	// An upload may take as long as it keeps arriving.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(10 * time.Minute))
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxUploadBytes)
	qpath := r.URL.Query().Get("path")
	var out []fileWritten
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				h.writeErr(w, r, uploadError(err, errorf(http.StatusBadRequest, "bad multipart body")))
				return
			}
			if part.FormName() != "file" {
				continue
			}
			target := qpath
			if target == "" {
				target = part.FileName()
			}
			fw, err := h.putFile(r.Context(), c, target, -1, part)
			if err != nil {
				h.writeErr(w, r, uploadError(err, err))
				return
			}
			out = append(out, fw)
		}
	} else {
		if r.Header.Get("Content-Encoding") != "" {
			writeRESTError(w, http.StatusBadRequest, "Content-Encoding %q is not supported", r.Header.Get("Content-Encoding"))
			return
		}
		fw, err := h.putFile(r.Context(), c, qpath, r.ContentLength, r.Body)
		if err != nil {
			h.writeErr(w, r, uploadError(err, err))
			return
		}
		out = append(out, fw)
	}
	if len(out) == 0 {
		writeRESTError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// uploadError is the body limit's 413 when err comes of it, else other.
func uploadError(err, other error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", mbe.Limit)
	}
	return other
}

// putFile writes body (size bytes; -1: unknown) as target, owned by the
// call's user.
func (h *Handler) putFile(ctx context.Context, c *envdCall, target string, size int64, body io.Reader) (fileWritten, error) {
	if target == "" {
		return fileWritten{}, errorf(http.StatusBadRequest, "the file's path is required")
	}
	p := c.resolve(target)
	err := h.on(ctx, c, "write file", func(sb *store.Sandbox) error {
		if _, err := h.sandboxes.WriteFile(ctx, sb, p, 0o644, size, body); err != nil {
			return err
		}
		if c.user != "root" {
			// Files are written as root; E2B's belong to the user who
			// wrote them.
			return h.run(ctx, sb, []string{"chown", c.user + ":", p})
		}
		return nil
	})
	if err != nil {
		return fileWritten{}, err
	}
	return fileWritten{Path: p, Name: path.Base(p), Type: "file"}, nil
}

// run runs a short command in sb as root (sandbox.Service.Exec); a
// non-zero exit is an error carrying its stderr.
func (h *Handler) run(ctx context.Context, sb *store.Sandbox, argv []string) error {
	res, err := h.sandboxes.Exec(ctx, sb, agentproto.ProcessSpec{Argv: argv, User: "root", TimeoutSeconds: 60}, nil, 1<<20)
	if err != nil {
		return err
	}
	if res.Exit.ExitCode == nil || *res.Exit.ExitCode != 0 {
		return &execFailed{stderr: strings.TrimSpace(string(res.Stderr.Data))}
	}
	return nil
}

type execFailed struct{ stderr string }

func (e *execFailed) Error() string { return e.stderr }
