package template

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/errdefs"
)

// Scratch dirs. A build works in <templates>/.build-<name>-<random>/ and
// removes it when done; a crash leaves it. So that a sweep can tell a
// crashed build's dir from a running one's (in this process or another),
// the build holds an flock on its scratch dir for as long as it runs, and
// the dir is made and the sweep runs under the templates lock, so the sweep
// never sees a dir not yet locked.
const (
	scratchPrefix = ".build-"
	trashPrefix   = ".deleting-" // remove's; only under the templates lock
)

// newScratch makes a build's scratch dir and locks it. release removes it
// and drops the lock.
func newScratch(templates, name string) (dir string, release func(), err error) {
	unlock, err := lockTemplates(templates)
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	dir, err = os.MkdirTemp(templates, scratchPrefix+name+"-")
	if err != nil {
		return "", nil, fmt.Errorf("template: scratch dir: %v: %w", err, errdefs.ErrInternal)
	}
	fd, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("template: lock scratch dir: %v: %w", err, errdefs.ErrInternal)
	}
	return dir, func() {
		os.RemoveAll(dir)
		unix.Close(fd)
	}, nil
}

// lockDir takes a non-blocking exclusive flock on dir and returns its fd;
// unix.EWOULDBLOCK when another holds it.
func lockDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// removeStaleScratch removes the scratch dirs of builds that no longer run
// (their process crashed) and what an interrupted delete left. It returns
// the names it removed.
func removeStaleScratch(templates string) ([]string, error) {
	ents, err := os.ReadDir(templates)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("template: list templates dir: %v: %w", err, errdefs.ErrInternal)
	}
	unlock, err := lockTemplates(templates)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var removed []string
	for _, e := range ents {
		dir := filepath.Join(templates, e.Name())
		switch {
		case !e.IsDir():
			continue
		case strings.HasPrefix(e.Name(), trashPrefix):
		case strings.HasPrefix(e.Name(), scratchPrefix):
			fd, err := lockDir(dir)
			if err != nil {
				continue // a running build holds it (or it just went)
			}
			defer unix.Close(fd)
		default:
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			return removed, fmt.Errorf("template: remove %s: %v: %w", e.Name(), err, errdefs.ErrInternal)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
