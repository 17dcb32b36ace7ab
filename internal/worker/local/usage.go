package local

import (
	"os"
	"syscall"
)

// allocatedBytes is the space a file occupies on disk (0 when unknown).
// Shared reflinked extents are counted in full; it is an upper bound.
func allocatedBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
