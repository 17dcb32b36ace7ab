package objstore

import "context"

// PutImage stores a template build (files of dir) under its digest, once:
// an image already stored is left as it is (Store.PutImage).
func (s Snapshots) PutImage(ctx context.Context, digest, dir string, files []string) error {
	_, err := s.Store.PutImage(ctx, digest, dir, files)
	return err
}

// FetchImage downloads image digest into dir, every chunk verified; its
// files appear under their names only when all are complete. Images are
// not kept in the Cache: the worker's templates dir is their local copy.
func (s Snapshots) FetchImage(ctx context.Context, digest, dir string) error {
	_, err := s.Store.GetImage(ctx, digest, dir)
	return err
}
