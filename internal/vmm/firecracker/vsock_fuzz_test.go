package firecracker

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzVsockAnswer feeds arbitrary bytes to the host side of the hybrid
// vsock handshake as Firecracker (or a guest behind it) answers CONNECT:
// no panic, no answer line over maxAnswer, nothing read past the line's
// newline (the guest's first bytes stay in the stream), and an accepted
// answer is "OK" and a port.
func FuzzVsockAnswer(f *testing.F) {
	for _, s := range []string{
		"OK 1073741824\nhello\n",
		"OK 1\n",
		"",
		"NOPE\n",
		"OK x\n",
		"OK 1073741824",
		"OK 99999999999\n",
		"OK  7 \r\n",
		strings.Repeat("A", 100) + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		line, err := readLine(r, maxAnswer)
		if err != nil {
			return
		}
		if len(line) >= maxAnswer {
			t.Fatalf("accepted a line of %d bytes", len(line))
		}
		if used := len(data) - r.Len(); used != len(line)+1 || data[used-1] != '\n' {
			t.Fatalf("line %q consumed %d bytes", line, used)
		}
		if parseAnswer(line) == nil {
			if f := strings.Fields(line); len(f) != 2 || f[0] != "OK" {
				t.Fatalf("accepted %q", line)
			}
		}
	})
}
