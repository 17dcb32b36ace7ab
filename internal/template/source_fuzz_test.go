package template

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/errdefs"
)

// FuzzSource decodes a build request the way a recipe file is read and
// resolves its source: every refusal must be a tenant-fit error of a class
// that is not internal, naming no host path the tenant did not give.
// Registry connections are refused before they are made: fuzzing never
// touches the network.
func FuzzSource(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		recipe := filepath.Join(dir, "recipe.json")
		if err := os.WriteFile(recipe, data, 0o644); err != nil {
			t.Fatal(err)
		}
		req, err := LoadRecipe(recipe)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("LoadRecipe: %v, want invalid_argument", err)
			}
			return
		}
		if err := ValidName(req.Name); err != nil {
			t.Fatalf("LoadRecipe accepted name %q: %v", req.Name, err)
		}

		roots := filepath.Join(dir, "imports")
		if err := os.Mkdir(roots, 0o755); err != nil {
			t.Fatal(err)
		}
		b, templates := newTestBuilder(t, func(c *BuilderConfig) { c.SourceRoots = []string{roots} })
		b.registry.proxyFor = func(*http.Request) (*url.URL, error) { return nil, nil }
		b.registry.transport.DialContext = func(context.Context, string, string) (net.Conn, error) { return nil, errRefused }
		tmp := filepath.Join(dir, "scratch")
		if err := os.Mkdir(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		bs := &buildState{progress: func(string, int) {}, log: io.Discard, tmp: tmp, limit: fuzzLimit}
		_, err = b.resolve(context.Background(), req.Source, bs)
		if err == nil {
			return
		}
		var pub *errdefs.Public
		if !errors.As(err, &pub) {
			t.Errorf("resolve: %v is not a tenant-fit error", err)
		}
		if errdefs.ClassOf(err) == errdefs.ErrInternal {
			t.Errorf("resolve: %v is internal", err)
		}
		for _, host := range []string{dir, templates} {
			if strings.Contains(err.Error(), host) && !strings.Contains(string(data), host) {
				t.Errorf("resolve: %q names a host path", err)
			}
		}
	})
}
