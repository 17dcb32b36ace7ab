package sandbox

import (
	"testing"

	"github.com/space-sandbox/space/internal/template"
)

// TestSize: the request wins, then the template's defaults, then the
// service's (a disk has no service default: the image's own).
func TestSize(t *testing.T) {
	s := &Service{cfg: Config{DefaultVCPUs: 1, DefaultMemoryMiB: 256}}
	for _, c := range []struct {
		d    template.Defaults
		req  Size
		want Size
	}{
		{want: Size{VCPUs: 1, MemoryMiB: 256}},
		{d: template.Defaults{Vcpus: 2, MemoryMiB: 512, DiskMiB: 2048}, want: Size{2, 512, 2048}},
		{d: template.Defaults{Vcpus: 2, MemoryMiB: 512, DiskMiB: 2048}, req: Size{4, 1024, 4096}, want: Size{4, 1024, 4096}},
		{d: template.Defaults{MemoryMiB: 512}, req: Size{VCPUs: 3}, want: Size{VCPUs: 3, MemoryMiB: 512}},
	} {
		if got := s.Size(c.d, c.req); got != c.want {
			t.Errorf("Size(%+v, %+v) = %+v, want %+v", c.d, c.req, got, c.want)
		}
	}
}
