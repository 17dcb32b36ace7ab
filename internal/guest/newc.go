package guest

import (
	"fmt"
	"io"
)

// CPIOWriter writes the "newc" (SVR4, no checksum) cpio format the kernel
// unpacks into its initial rootfs; every initramfs SPACE makes (the agent's,
// the VMM's accel probe, test guests) goes through it. It is written here rather than taken from
// a library because the maintained Go cpio writers do not record device
// numbers, and the initramfs needs a /dev/console node so PID 1 starts with
// stdin/stdout/stderr attached. Every entry gets mtime 0 and a sequential
// inode so the same input always gives the same bytes.
type CPIOWriter struct {
	w   io.Writer
	ino uint32
	err error
}

const (
	sIFDIR  = 0o040000
	sIFREG  = 0o100000
	sIFLNK  = 0o120000
	sIFCHR  = 0o020000
	trailer = "TRAILER!!!"
)

var zeros [4]byte

// NewCPIOWriter returns a writer of a newc archive to w. Errors stick: the
// first one is returned by Close.
func NewCPIOWriter(w io.Writer) *CPIOWriter { return &CPIOWriter{w: w} }

func (c *CPIOWriter) header(name string, mode uint32, size int64, nlink, rmajor, rminor uint32) {
	if c.err != nil {
		return
	}
	if size > 0xffffffff {
		c.err = fmt.Errorf("cpio: %s is too large for newc (%d bytes)", name, size)
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, uint32(size), 0, 0, rmajor, rminor, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, hdr+name+"\x00")
	c.pad(int64(len(hdr) + len(name) + 1))
}

func (c *CPIOWriter) pad(n int64) {
	if c.err != nil {
		return
	}
	if p := (4 - n%4) % 4; p > 0 {
		_, c.err = c.w.Write(zeros[:p])
	}
}

// Dir adds a directory. Parents must have been added first.
func (c *CPIOWriter) Dir(name string, perm uint32) {
	c.header(name, sIFDIR|perm, 0, 2, 0, 0)
}

// CharDev adds a character device node.
func (c *CPIOWriter) CharDev(name string, perm, major, minor uint32) {
	c.header(name, sIFCHR|perm, 0, 1, major, minor)
}

// Symlink adds a symbolic link to target.
func (c *CPIOWriter) Symlink(name, target string) {
	c.header(name, sIFLNK|0o777, int64(len(target)), 1, 0, 0)
	if c.err == nil {
		_, c.err = io.WriteString(c.w, target)
	}
	c.pad(int64(len(target)))
}

// File adds a regular file of exactly size bytes read from r.
func (c *CPIOWriter) File(name string, perm uint32, r io.Reader, size int64) {
	c.header(name, sIFREG|perm, size, 1, 0, 0)
	if c.err != nil {
		return
	}
	n, err := io.Copy(c.w, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("cpio: %s: wrote %d of %d bytes", name, n, size)
	}
	c.err = err
	c.pad(size)
}

// Close writes the trailer. It does not close the underlying writer.
func (c *CPIOWriter) Close() error {
	c.header(trailer, 0, 0, 1, 0, 0)
	return c.err
}
