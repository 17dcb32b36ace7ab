// Package template owns template root filesystems: it builds a template's
// ext4 image and records its metadata under a templates directory:
//
//	<templates>/<name>/rootfs.ext4     the root disk image sandboxes clone
//	<templates>/<name>/template.json   Metadata
//
// Today it builds the built-in `base` template (busybox, see BuildBase); the
// OCI, Debian and rootfs-tar sources of the API reuse the same staging →
// ext4 → metadata steps. It does not boot templates or keep snapshots (the
// worker does) and does not clone images for sandboxes (internal/storage).
package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
)

// File names inside a template's directory.
const (
	ImageFile    = "rootfs.ext4"
	MetadataFile = "template.json"
)

// Defaults are a template's runtime defaults (the API's `defaults`).
type Defaults struct {
	Vcpus        int               `json:"vcpus"`
	MemoryMiB    int               `json:"memory_mib"`
	DiskMiB      int               `json:"disk_mib"`
	Env          map[string]string `json:"env,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	User         string            `json:"user,omitempty"`
	StartCommand []string          `json:"start_command,omitempty"`
	ReadyCommand []string          `json:"ready_command,omitempty"`
}

// Metadata describes one built template image.
type Metadata struct {
	Name string `json:"name"`
	// Digest is "sha256:<hex>" over the image bytes and the defaults.
	Digest string `json:"digest"`
	// SizeBytes is the image's apparent size (the disk the guest sees).
	SizeBytes int64     `json:"size_bytes"`
	Defaults  Defaults  `json:"defaults"`
	CreatedAt time.Time `json:"created_at"`
	// InputDigest identifies what the image was built from; an equal value
	// means a rebuild would produce an equivalent image, so it is skipped.
	InputDigest string `json:"input_digest"`
	// Image is the absolute path of the root disk image. Not stored: it is
	// derived from where the metadata was read.
	Image string `json:"-"`
}

// Dir is the directory of template name under templates.
func Dir(templates, name string) string { return filepath.Join(templates, name) }

// Load reads the metadata of template name. A template that was never built
// is ErrNotFound.
func Load(templates, name string) (Metadata, error) {
	dir := Dir(templates, name)
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if errors.Is(err, os.ErrNotExist) {
		return Metadata{}, fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return Metadata{}, fmt.Errorf("template %s: read metadata: %v: %w", name, err, errdefs.ErrInternal)
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("template %s: decode metadata: %v: %w", name, err, errdefs.ErrDataLoss)
	}
	m.Image = filepath.Join(dir, ImageFile)
	if _, err := os.Stat(m.Image); err != nil {
		return Metadata{}, fmt.Errorf("template %s: image missing: %v: %w", name, err, errdefs.ErrNotFound)
	}
	return m, nil
}

// save writes m atomically into dir.
func save(dir string, m Metadata) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("template %s: encode metadata: %v: %w", m.Name, err, errdefs.ErrInternal)
	}
	tmp := filepath.Join(dir, "."+MetadataFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("template %s: write metadata: %v: %w", m.Name, err, errdefs.ErrInternal)
	}
	if err := os.Rename(tmp, filepath.Join(dir, MetadataFile)); err != nil {
		return fmt.Errorf("template %s: write metadata: %v: %w", m.Name, err, errdefs.ErrInternal)
	}
	return nil
}
