package local_test

import (
	"os"

	"golang.org/x/sys/unix"
)

func fallocate(f *os.File, n int64) error {
	if n <= 0 {
		return nil
	}
	return unix.Fallocate(int(f.Fd()), 0, 0, n)
}
