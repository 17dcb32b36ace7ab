package template

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkBuild prints build times, cold (nothing cached) and cached (an
// unchanged rebuild), and image size against content size, for the base
// template, a small OCI image and the python recipe (which needs
// mmdebstrap and a Debian mirror; its cold runs reuse the apt download
// cache after the first).
//
//	go test -run '^$' -bench Build -benchtime 1x ./internal/template
func BenchmarkBuild(b *testing.B) {
	needBuildHost(b)
	ctx := context.Background()
	agent := filepath.Join(b.TempDir(), "space-agent")
	if err := os.WriteFile(agent, []byte("stand-in agent\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B, m Metadata) {
		b.ReportMetric(float64(m.SizeBytes)/mib, "image_MiB")
		b.ReportMetric(float64(m.ContentBytes)/mib, "content_MiB")
	}

	b.Run("base/cold", func(b *testing.B) {
		var m Metadata
		for b.Loop() {
			var err error
			if m, err = BuildBase(ctx, BaseOptions{TemplatesDir: b.TempDir(), AgentBinary: agent}); err != nil {
				b.Fatal(err)
			}
		}
		report(b, m)
	})
	b.Run("base/cached", func(b *testing.B) {
		opts := BaseOptions{TemplatesDir: b.TempDir(), AgentBinary: agent}
		m, err := BuildBase(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := BuildBase(ctx, opts); err != nil {
				b.Fatal(err)
			}
		}
		report(b, m)
	})

	builds := []struct {
		name string
		req  func(b *testing.B) BuildRequest
	}{
		{"oci-small", func(b *testing.B) BuildRequest {
			return BuildRequest{Name: "small", Source: Source{Type: SourceOCI, Path: writeLayout(b, testImage(b))}}
		}},
		{"python", func(b *testing.B) BuildRequest {
			needMmdebstrap(b)
			req, err := LoadRecipe(filepath.Join("..", "..", "templates", "python.json"))
			if err != nil {
				b.Fatal(err)
			}
			return req
		}},
	}
	cache := filepath.Join(b.TempDir(), "cache")
	for _, bc := range builds {
		for _, cached := range []bool{false, true} {
			label := bc.name + "/cold"
			if cached {
				label = bc.name + "/cached"
			}
			b.Run(label, func(b *testing.B) {
				req := bc.req(b)
				bld, err := NewBuilder(BuilderConfig{TemplatesDir: b.TempDir(), AgentBinary: agent, CacheDir: cache, AllowScripts: true})
				if err != nil {
					b.Fatal(err)
				}
				req.NoCache = !cached
				m, err := bld.Build(ctx, req, nil, nil) // warms the cache; cold runs rebuild anyway
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if m, err = bld.Build(ctx, req, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				report(b, m)
			})
		}
	}
}
