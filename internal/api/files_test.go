package api

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/errdefs"
)

func TestFiles(t *testing.T) {
	e := newEnv(t, Config{MaxUploadBytes: 1 << 16})
	ctx := t.Context()
	sb := e.running(e.alice, nil)

	info, err := e.alice.PutFile(ctx, sb.ID, "/work/dir/hello.txt", 0o600, strings.NewReader("hi there"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "hello.txt" || info.Size != 8 || info.Mode != "0600" || info.Type != "file" {
		t.Errorf("put answer: %+v", info)
	}
	rc, err := e.alice.GetFile(ctx, sb.ID, "/work/dir/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hi there" {
		t.Errorf("get: %q", b)
	}
	// What a file write puts there, a command sees.
	res, err := e.alice.Exec(ctx, sb.ID, execShell("cat "+e.worker.VM(sb.ID).Root+"/work/dir/hello.txt"))
	if err != nil || res.Stdout != "hi there" {
		t.Errorf("exec sees file: %+v %v", res, err)
	}
	list, err := e.alice.ListFiles(ctx, sb.ID, "/work/dir")
	if err != nil || len(list) != 1 || list[0].Name != "hello.txt" {
		t.Errorf("list: %+v %v", list, err)
	}

	// Tar round trip of a directory.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a/b.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("abc"))
	tw.Close()
	if err := e.alice.PutTar(ctx, sb.ID, "/srv", &buf); err != nil {
		t.Fatal(err)
	}
	tr, err := e.alice.GetTar(ctx, sb.ID, "/srv")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	rd := tar.NewReader(tr)
	for {
		h, err := rd.Next()
		if err != nil {
			break
		}
		if strings.TrimPrefix(h.Name, "./") == "a/b.txt" {
			data, _ := io.ReadAll(rd)
			found = string(data) == "abc"
		}
	}
	tr.Close()
	if !found {
		t.Error("tar out lacks a/b.txt")
	}

	if err := e.alice.DeleteFile(ctx, sb.ID, "/work", false); err == nil {
		t.Error("deleted a non-empty dir without recursive")
	}
	if err := e.alice.DeleteFile(ctx, sb.ID, "/work", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.alice.GetFile(ctx, sb.ID, "/work/dir/hello.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}

	// Errors: relative path, bad mode, too large, other tenant.
	status, _, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/files?path=rel/x", e.aliceKey, nil)
	wantError(t, status, body, 400, "invalid_argument")
	status, _, body = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/x&mode=999", e.aliceKey, []byte("x"))
	wantError(t, status, body, 400, "invalid_argument")
	status, _, body = e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/big", e.aliceKey, make([]byte, 1<<17), "Content-Type", "application/octet-stream")
	wantError(t, status, body, 413, "payload_too_large")
	if _, err := e.bob.ListFiles(ctx, sb.ID, "/"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob lists alice's files: %v", err)
	}
	var ce *client.Error
	if _, err := e.alice.ListFiles(ctx, sb.ID, "/nonexistent"); !errors.As(err, &ce) || ce.Status != 404 {
		t.Errorf("list missing dir: %v", err)
	}
}
