package mcp

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// capture keeps the head and the tail of an output stream, at most limit
// bytes in all, and counts what it leaves out of the middle: the start of an
// output says what ran, its end usually says why it failed.
type capture struct {
	limit      int
	head, tail []byte
	total      int64
}

func newCapture(limit int) *capture { return &capture{limit: limit} }

func (c *capture) Write(p []byte) {
	c.total += int64(len(p))
	half := c.limit / 2
	if n := min(half-len(c.head), len(p)); n > 0 {
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	c.tail = append(c.tail, p...)
	if keep := c.limit - half; len(c.tail) > 2*keep {
		c.tail = append(c.tail[:0:0], c.tail[len(c.tail)-keep:]...)
	}
}

// String returns the kept text, with a marker where bytes were cut, and how
// many bytes were cut.
func (c *capture) String() (string, int64) {
	if keep := c.limit - c.limit/2; len(c.tail) > keep {
		c.tail = c.tail[len(c.tail)-keep:]
	}
	cut := c.total - int64(len(c.head)) - int64(len(c.tail))
	if cut == 0 {
		return text(append(c.head[:len(c.head):len(c.head)], c.tail...)), 0
	}
	head, tail := trimRunes(c.head, c.tail)
	cut += int64(len(c.head)-len(head)) + int64(len(c.tail)-len(tail))
	return text(head) + fmt.Sprintf("\n[… %d bytes cut …]\n", cut) + text(tail), cut
}

// trimRunes drops the partial UTF-8 sequences a cut leaves at the end of
// head and the start of tail.
func trimRunes(head, tail []byte) ([]byte, []byte) {
	for i := 0; i < utf8.UTFMax && len(head) > 0; i++ {
		r, size := utf8.DecodeLastRune(head)
		if r != utf8.RuneError || size > 1 {
			break
		}
		head = head[:len(head)-1]
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	return head, tail
}

// text makes output bytes a JSON-safe string; bytes that are not UTF-8
// become U+FFFD.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
