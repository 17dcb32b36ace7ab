package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(append([]byte(nil), b...)) }

func filesPut(env *Env) *cobra.Command {
	var mode string
	return command(env, "files put", func(fs *pflag.FlagSet) {
		fs.StringVar(&mode, "mode", "", "octal permission bits of the file (default 0644)")
	}, func(ctx context.Context, cl *call) error { return putFiles(ctx, env, cl, mode) })
}

func putFiles(ctx context.Context, env *Env, cl *call, mode string) error {
	var m uint64
	var err error
	if mode != "" {
		if m, err = strconv.ParseUint(mode, 8, 32); err != nil {
			return usagef("--mode: want octal bits such as 0644")
		}
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	sbx, local, remote := cl.pos[0], cl.pos[1], cl.pos[2]
	if local != "-" {
		if st, err := os.Stat(local); err == nil && st.IsDir() {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTar(pw, local)) }()
			if err := c.PutTar(ctx, sbx, remote, pr); err != nil {
				return err
			}
			if cl.json {
				return printJSON(env.Stdout, map[string]string{"path": remote, "format": "tar"})
			}
			return nil
		}
	}
	var in io.Reader = env.Stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	info, err := c.PutFile(ctx, sbx, remote, uint32(m), in)
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, info)
	}
	return nil
}

// writeTar writes the directory dir as a tar stream with relative names.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func filesGet(env *Env) *cobra.Command {
	var asTar bool
	return command(env, "files get", func(fs *pflag.FlagSet) {
		fs.BoolVar(&asTar, "tar", false, "fetch a directory as a tar stream")
	}, func(ctx context.Context, cl *call) error { return getFiles(ctx, env, cl, asTar) })
}

func getFiles(ctx context.Context, env *Env, cl *call, asTar bool) error {
	if len(cl.pos) != 2 && len(cl.pos) != 3 {
		return usagef("want files get ID REMOTE [LOCAL]")
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	var rc io.ReadCloser
	if asTar {
		rc, err = c.GetTar(ctx, cl.pos[0], cl.pos[1])
	} else {
		rc, err = c.GetFile(ctx, cl.pos[0], cl.pos[1])
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	out := env.Stdout
	if len(cl.pos) == 3 && cl.pos[2] != "-" {
		f, err := os.Create(cl.pos[2])
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	_, err = io.Copy(out, rc)
	return err
}

func filesLs(env *Env) *cobra.Command {
	return command(env, "files ls", nil, func(ctx context.Context, cl *call) error { return listFiles(ctx, env, cl) })
}

func listFiles(ctx context.Context, env *Env, cl *call) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	entries, err := c.ListFiles(ctx, cl.pos[0], cl.pos[1])
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, entries)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Mode, e.Type, e.Size, e.MTime.Local().Format(time.DateTime), e.Name)
	}
	return tw.Flush()
}
