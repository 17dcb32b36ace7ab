package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/space-sandbox/space/internal/client"
)

// WriteFileArgs are write_file's arguments; exactly one of Content and
// ContentBase64 is set (an empty file: content "").
type WriteFileArgs struct {
	SandboxID     string  `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	Path          string  `json:"path" jsonschema:"absolute path in the sandbox; parent directories are created"`
	Content       *string `json:"content,omitempty" jsonschema:"the file's text (give this or content_base64)"`
	ContentBase64 *string `json:"content_base64,omitempty" jsonschema:"the file's bytes, base64-encoded (give this or content)"`
}

// FileResult describes a written file.
type FileResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode string `json:"mode" jsonschema:"octal permission bits, e.g. 0644"`
}

// PathArgs name a path in a sandbox.
type PathArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox id (sbx_…)"`
	Path      string `json:"path" jsonschema:"absolute path in the sandbox"`
}

// ReadFileResult is read_file's result: Content when the file is UTF-8
// text, ContentBase64 otherwise.
type ReadFileResult struct {
	Path          string `json:"path"`
	Size          int64  `json:"size" jsonschema:"the file's size in bytes"`
	Content       string `json:"content,omitempty" jsonschema:"the file's text, when it is UTF-8"`
	ContentBase64 string `json:"content_base64,omitempty" jsonschema:"the file's bytes, base64-encoded, when it is not UTF-8"`
	CutBytes      int64  `json:"cut_bytes" jsonschema:"bytes at the end of the file left out of this result"`
}

// FileEntry is one entry of list_files.
type FileEntry struct {
	Name  string    `json:"name"`
	Type  string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
}

// FileList is list_files' result.
type FileList struct {
	Path    string      `json:"path"`
	Entries []FileEntry `json:"entries"`
}

func (s *Server) addFileTools() {
	addTool(s, &mcpsdk.Tool{Name: "write_file",
		Description: "Write a file in a sandbox (replacing it if it exists; parent directories are created). " +
			"Give content (text) or content_base64 (bytes).",
		Annotations: annotations("Write file", false, true, true, false)},
		func(ctx context.Context, c *client.Client, in WriteFileArgs) (FileResult, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return FileResult{}, err
			}
			var data []byte
			switch {
			case (in.Content == nil) == (in.ContentBase64 == nil):
				return FileResult{}, errors.New("invalid_argument: give exactly one of content and content_base64")
			case in.Content != nil:
				data = []byte(*in.Content)
			default:
				b, err := base64.StdEncoding.DecodeString(*in.ContentBase64)
				if err != nil {
					return FileResult{}, fmt.Errorf("invalid_argument: content_base64: %v", err)
				}
				data = b
			}
			fi, err := c.PutFile(ctx, in.SandboxID, in.Path, 0, bytes.NewReader(data))
			if err != nil {
				return FileResult{}, err
			}
			return FileResult{Path: in.Path, Size: fi.Size, Mode: fi.Mode}, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "read_file",
		Description: fmt.Sprintf("Read a file of a sandbox: its text in content, or base64 in content_base64 when it "+
			"is not UTF-8. At most %d bytes are returned (cut_bytes says how many were left out).", s.cfg.OutputCap),
		Annotations: annotations("Read file", true, false, true, false)},
		func(ctx context.Context, c *client.Client, in PathArgs) (ReadFileResult, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return ReadFileResult{}, err
			}
			rc, err := c.GetFile(ctx, in.SandboxID, in.Path)
			if err != nil {
				return ReadFileResult{}, err
			}
			defer rc.Close()
			data, err := io.ReadAll(io.LimitReader(rc, int64(s.cfg.OutputCap)))
			if err != nil {
				return ReadFileResult{}, fmt.Errorf("read %s: %w", in.Path, err)
			}
			rest, err := io.Copy(io.Discard, rc)
			if err != nil {
				return ReadFileResult{}, fmt.Errorf("read %s: %w", in.Path, err)
			}
			res := ReadFileResult{Path: in.Path, Size: int64(len(data)) + rest, CutBytes: rest}
			if rest > 0 {
				// A cut in the middle of a rune is not a reason for base64.
				data, _ = trimRunes(data, nil)
				res.CutBytes = res.Size - int64(len(data))
			}
			if utf8.Valid(data) {
				res.Content = string(data)
			} else {
				res.ContentBase64 = base64.StdEncoding.EncodeToString(data)
			}
			return res, nil
		})

	addTool(s, &mcpsdk.Tool{Name: "list_files",
		Description: "List a directory of a sandbox: each entry's name, type, size, mode and modification time.",
		Annotations: annotations("List files", true, false, true, false)},
		func(ctx context.Context, c *client.Client, in PathArgs) (FileList, error) {
			if err := needID("sandbox_id", in.SandboxID); err != nil {
				return FileList{}, err
			}
			list, err := c.ListFiles(ctx, in.SandboxID, in.Path)
			if err != nil {
				return FileList{}, err
			}
			out := FileList{Path: in.Path, Entries: make([]FileEntry, 0, len(list))}
			for _, f := range list {
				out.Entries = append(out.Entries, FileEntry{Name: f.Name, Type: f.Type, Size: f.Size, Mode: f.Mode, MTime: f.MTime})
			}
			return out, nil
		})
}
