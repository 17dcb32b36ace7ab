package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// latestFile names the newest build of a template (its digest).
const latestFile = "latest"

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Dir is the directory of template name under templates.
func Dir(templates, name string) string { return filepath.Join(templates, name) }

// BuildDir is the directory of one build.
func BuildDir(templates, name, digest string) string {
	return filepath.Join(templates, name, strings.TrimPrefix(digest, "sha256:"))
}

// Load reads the metadata of a template reference: "name" is the newest
// build, "name@sha256:<hex>" exactly that one. A template or build that does
// not exist is ErrNotFound.
func Load(templates, ref string) (Metadata, error) {
	name, digest, err := ParseRef(ref)
	if err != nil {
		return Metadata{}, err
	}
	if digest != "" {
		return LoadDigest(templates, name, digest)
	}
	if b, err := os.ReadFile(filepath.Join(Dir(templates, name), latestFile)); err == nil {
		if m, err := LoadDigest(templates, name, strings.TrimSpace(string(b))); err == nil {
			return m, nil
		}
	}
	builds, err := List(templates, name) // no pointer (or a stale one): the newest by time
	if err != nil {
		return Metadata{}, err
	}
	if len(builds) == 0 {
		return Metadata{}, errdefs.New(errdefs.ErrNotFound, "template %s not found", name)
	}
	return builds[0], nil
}

// LoadDigest reads the build digest ("sha256:<hex>") of template name.
func LoadDigest(templates, name, digest string) (Metadata, error) {
	if err := ValidName(name); err != nil {
		return Metadata{}, err
	}
	if !digestRE.MatchString(digest) {
		return Metadata{}, errdefs.New(errdefs.ErrInvalidArgument, "template digest %q is invalid", digest)
	}
	m, err := readBuild(BuildDir(templates, name, digest))
	if errors.Is(err, os.ErrNotExist) {
		return Metadata{}, errdefs.New(errdefs.ErrNotFound, "template %s@%s not found", name, digest)
	}
	if err != nil {
		return Metadata{}, fmt.Errorf("template %s@%s: %w", name, digest, err)
	}
	return m, nil
}

// List returns every build of template name, newest first. A template never
// built has none (and no error).
func List(templates, name string) ([]Metadata, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(Dir(templates, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: list builds: %v: %w", name, err, errdefs.ErrInternal)
	}
	var out []Metadata
	for _, e := range ents {
		if !e.IsDir() || !hexRE.MatchString(e.Name()) {
			continue
		}
		m, err := readBuild(filepath.Join(Dir(templates, name), e.Name()))
		if err != nil {
			continue // half-deleted or foreign: not a build
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].Digest > out[j].Digest
	})
	return out, nil
}

// Names lists the templates that have at least one build directory.
func Names(templates string) ([]string, error) {
	ents, err := os.ReadDir(templates)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("template: list templates: %v: %w", err, errdefs.ErrInternal)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && nameRE.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func readBuild(dir string) (Metadata, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Metadata{}, err
		}
		return Metadata{}, fmt.Errorf("read metadata: %v: %w", err, errdefs.ErrInternal)
	}
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("decode metadata: %v: %w", err, errdefs.ErrDataLoss)
	}
	m.Image = filepath.Join(dir, ImageFile)
	if _, err := os.Stat(m.Image); err != nil {
		return Metadata{}, err
	}
	return m, nil
}

// findInput returns the build of name made from input, if any.
func findInput(templates, name, input string) (Metadata, bool) {
	builds, err := List(templates, name)
	if err != nil {
		return Metadata{}, false
	}
	for _, m := range builds {
		if m.InputDigest == input {
			return m, true
		}
	}
	return Metadata{}, false
}

// lockTemplates takes an exclusive flock on the templates directory itself
// (no lock file to leave behind); it orders installs and deletes across
// goroutines and processes. Builds run unlocked.
func lockTemplates(templates string) (unlock func(), err error) {
	if err := os.MkdirAll(templates, 0o755); err != nil {
		return nil, fmt.Errorf("template: create templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	fd, err := unix.Open(templates, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("template: open templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("template: lock templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	return func() { unix.Close(fd) }, nil
}

// install moves a finished build (out holds ImageFile; m is complete but
// for Image) into place and makes it the newest. When an identical build
// already exists, out is discarded and the existing build is returned.
func install(templates string, m Metadata, out string) (Metadata, error) {
	unlock, err := lockTemplates(templates)
	if err != nil {
		return Metadata{}, err
	}
	defer unlock()
	dir := Dir(templates, m.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Metadata{}, fmt.Errorf("template %s: create dir: %v: %w", m.Name, err, errdefs.ErrInternal)
	}
	target := BuildDir(templates, m.Name, m.Digest)
	if existing, err := readBuild(target); err == nil {
		os.RemoveAll(out)
		return existing, setLatest(dir, existing.Digest)
	}
	if err := save(out, m); err != nil {
		return Metadata{}, err
	}
	os.RemoveAll(target) // a half-written leftover of a crash
	if err := os.Rename(out, target); err != nil {
		return Metadata{}, fmt.Errorf("template %s: install build: %v: %w", m.Name, err, errdefs.ErrInternal)
	}
	m.Image = filepath.Join(target, ImageFile)
	return m, setLatest(dir, m.Digest)
}

func setLatest(dir, digest string) error {
	tmp := filepath.Join(dir, "."+latestFile+".tmp")
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o644); err != nil {
		return fmt.Errorf("template: write latest: %v: %w", err, errdefs.ErrInternal)
	}
	if err := os.Rename(tmp, filepath.Join(dir, latestFile)); err != nil {
		return fmt.Errorf("template: write latest: %v: %w", err, errdefs.ErrInternal)
	}
	return nil
}

// remove deletes one build (digest set) or every build of name. Removing
// the newest build makes the next newest one current; removing the last
// removes the template's directory.
func remove(templates, name, digest string) error {
	unlock, err := lockTemplates(templates)
	if err != nil {
		return err
	}
	defer unlock()
	dir := Dir(templates, name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return errdefs.New(errdefs.ErrNotFound, "template %s not found", name)
	}
	victim := dir
	if digest != "" {
		victim = BuildDir(templates, name, digest)
		if _, err := os.Stat(victim); errors.Is(err, os.ErrNotExist) {
			return errdefs.New(errdefs.ErrNotFound, "template %s@%s not found", name, digest)
		}
	}
	// Rename first so no reader ever sees half a build.
	trash, err := os.MkdirTemp(templates, trashPrefix)
	if err != nil {
		return fmt.Errorf("template: delete: %v: %w", err, errdefs.ErrInternal)
	}
	defer os.RemoveAll(trash)
	if err := os.Rename(victim, filepath.Join(trash, "x")); err != nil {
		return fmt.Errorf("template %s: delete: %v: %w", name, err, errdefs.ErrInternal)
	}
	if digest == "" {
		return nil
	}
	rest, err := List(templates, name)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return os.RemoveAll(dir)
	}
	return setLatest(dir, rest[0].Digest)
}

// save writes m into dir atomically.
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
