package objstore

import (
	"context"
	"fmt"
	"regexp"

	"github.com/space-sandbox/space/internal/errdefs"
)

// imageDigest is how SPACE names a template build: sha256:<64 hex>.
var imageDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func checkDigest(digest string) error {
	if !imageDigest.MatchString(digest) {
		return fmt.Errorf("image digest %q: %w: want sha256:<64 hex digits>", digest, errdefs.ErrInvalidArgument)
	}
	return nil
}

// PutImage uploads a template image (its files, relative to dir) under its
// digest. An image is put once: when the digest is stored already, its
// manifest is returned and nothing is uploaded, so workers that built the
// same template race harmlessly.
func (s *Store) PutImage(ctx context.Context, digest, dir string, files []string) (*Manifest, error) {
	if err := checkDigest(digest); err != nil {
		return nil, err
	}
	return s.put(ctx, kindImage, digest, dir, files, true, nil)
}

// StatImage returns the manifest of the image, ErrNotFound when none.
func (s *Store) StatImage(ctx context.Context, digest string) (*Manifest, error) {
	if err := checkDigest(digest); err != nil {
		return nil, err
	}
	return s.stat(ctx, kindImage, digest)
}

// GetImage downloads the image into dir, verified as GetSnapshot does.
func (s *Store) GetImage(ctx context.Context, digest, dir string) (*Manifest, error) {
	m, err := s.StatImage(ctx, digest)
	if err != nil {
		return nil, err
	}
	return m, s.download(ctx, m, dir)
}

// ListImages returns the digests of the stored images.
func (s *Store) ListImages(ctx context.Context) ([]string, error) {
	return s.list(ctx, kindImage, "")
}

// DeleteImage removes an image (manifest first, then its chunks).
func (s *Store) DeleteImage(ctx context.Context, digest string) error {
	if err := checkDigest(digest); err != nil {
		return err
	}
	return s.delete(ctx, kindImage, digest)
}
