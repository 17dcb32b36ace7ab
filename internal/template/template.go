// Package template owns template root filesystems: it builds a template's
// ext4 image from a source (an OCI image, a Debian recipe, a rootfs archive
// or directory, or the built-in busybox `base`) and keeps every build under a
// templates directory, addressed by name and content digest:
//
//	<templates>/<name>/<digest-hex>/rootfs.ext4    the root disk sandboxes clone
//	<templates>/<name>/<digest-hex>/template.json  Metadata
//	<templates>/<name>/latest                      digest of the newest build
//
// `name` means the newest build, `name@sha256:<hex>` exactly one. Builder
// builds (with a cache keyed by the source's digest), Load and LoadDigest
// read, Builder.Delete removes. It does not boot templates or keep snapshots
// (the worker does), does not decide whether a build is still in use (the
// caller guards Delete), and does not clone images for sandboxes
// (internal/storage).
package template

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/strictjson"
)

// File names inside a build's directory.
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

// Source says what a template is built from (the API's `source`).
type Source struct {
	// Type is SourceOCI, SourceDebian or SourceRootfs.
	Type string `json:"type"`
	// Path is a host path: for oci an OCI image layout directory or a
	// `docker save`/OCI archive tar; for rootfs a tar (optionally gzip) or a
	// directory.
	Path string `json:"path,omitempty"`
	// Image is a registry reference for oci ("debian:bookworm-slim",
	// "ghcr.io/o/r@sha256:…"), pulled for linux/amd64.
	Image string `json:"image,omitempty"`
	// Suite, Variant (mmdebstrap --variant; default minbase), Packages and
	// Script (run with /bin/sh -e inside the image at build time) describe
	// a debian build.
	Suite    string   `json:"suite,omitempty"`
	Variant  string   `json:"variant,omitempty"`
	Packages []string `json:"packages,omitempty"`
	Script   string   `json:"script,omitempty"`
}

// Source types.
const (
	SourceOCI    = "oci"
	SourceDebian = "debian"
	SourceRootfs = "rootfs"
	// SourceBase marks the built-in busybox template (BuildBase).
	SourceBase = "base"
)

// ImageConfig is what an OCI image's config says about running it, kept
// for information: Entrypoint and Cmd do not become a start command on
// their own (an interactive default like `python3` would exit at once).
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Metadata describes one build of a template.
type Metadata struct {
	Name string `json:"name"`
	// Digest is "sha256:<hex>" over the image bytes and the defaults.
	Digest string `json:"digest"`
	// SizeBytes is the image's apparent size (the disk the guest sees).
	SizeBytes int64 `json:"size_bytes"`
	// ContentBytes is what the files take, in 4 KiB blocks.
	ContentBytes int64     `json:"content_bytes,omitempty"`
	Defaults     Defaults  `json:"defaults"`
	CreatedAt    time.Time `json:"created_at"`
	// Source is what the build was made from; SourceDigest identifies its
	// content (OCI manifest digest, archive sha256, recipe hash).
	Source       *Source `json:"source,omitempty"`
	SourceDigest string  `json:"source_digest,omitempty"`
	// ImageConfig is the OCI image's run configuration, for oci sources.
	ImageConfig *ImageConfig `json:"image_config,omitempty"`
	// Warnings are notes a tenant should see (e.g. "no /bin/sh: added busybox").
	Warnings []string `json:"warnings,omitempty"`
	// InputDigest identifies everything the image was built from; an equal
	// value means a rebuild would produce an equivalent image, so it is skipped.
	InputDigest string `json:"input_digest"`
	// Image is the absolute path of the root disk image. Not stored: it is
	// derived from where the metadata was read.
	Image string `json:"-"`
}

// Ref returns "name@sha256:<hex>", the reference that pins this build.
func (m Metadata) Ref() string { return m.Name + "@" + m.Digest }

// BuildRequest is one build (the API's POST /v1/templates body).
type BuildRequest struct {
	Name     string   `json:"name"`
	Source   Source   `json:"source"`
	Defaults Defaults `json:"defaults"`
	// NoCache rebuilds even when a build from the same inputs exists
	// (a Debian recipe then picks up newer packages).
	NoCache bool `json:"no_cache,omitempty"`
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ValidName reports whether name is a valid template name
// (^[a-z0-9][a-z0-9-]{0,62}$) as an invalid_argument error.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return errdefs.New(errdefs.ErrInvalidArgument,
			"template name %q is invalid: use 1-63 lowercase letters, digits and '-', starting with a letter or digit", name)
	}
	return nil
}

// ParseRef splits "name" or "name@sha256:<hex>" into name and digest
// (digest is "" for a bare name).
func ParseRef(ref string) (name, digest string, err error) {
	name, digest, pinned := strings.Cut(ref, "@")
	if err := ValidName(name); err != nil {
		return "", "", err
	}
	if pinned && !digestRE.MatchString(digest) {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument,
			"template reference %q is invalid: the digest must be sha256: and 64 hex digits", ref)
	}
	return name, digest, nil
}

// LoadRecipe reads a build request from a JSON recipe file (the shape of
// the API's POST /v1/templates body, e.g. templates/python.json).
func LoadRecipe(path string) (BuildRequest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return BuildRequest{}, fmt.Errorf("template recipe %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	var req BuildRequest
	// strictjson: the message names the recipe's field, not a Go type.
	if err := strictjson.Decode(b, &req); err != nil {
		return BuildRequest{}, fmt.Errorf("template recipe %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	if err := ValidName(req.Name); err != nil {
		return BuildRequest{}, err
	}
	return req, nil
}
