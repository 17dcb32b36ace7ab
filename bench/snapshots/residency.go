package main

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentMiB is how much of the file at path is in the page cache (mincore
// over a read-only mapping; the mapping touches nothing).
func residentMiB(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	// x/sys/unix has no Mincore wrapper on linux.
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, e
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n*page) / (1 << 20), nil
}
