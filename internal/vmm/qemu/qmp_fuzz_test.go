package qemu

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzQMPReader feeds arbitrary bytes to the QMP line reader as QEMU's
// side of the socket: no panic, every line it returns decoded is a JSON
// object within qmpMaxLine, and it ends (too long, EOF) after a bounded
// number of lines.
func FuzzQMPReader(f *testing.F) {
	for _, s := range []string{
		`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 9}}, "capabilities": ["oob"]}}` + "\n",
		`{"return": {}, "id": "1"}` + "\n",
		`{"return": {"status": "running", "running": true}, "id": "2"}` + "\r\n",
		`{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n" + `{"error": {"class": "GenericError", "desc": "no"}, "id": "3"}` + "\n",
		"not json\n[1,2]\nnull\n{}",
		`{"id": {"nested": [1, 2, 3]}, "return": "x"}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newQMPReader(bytes.NewReader(data))
		for lines := 0; ; lines++ {
			if lines > len(data)+1 {
				t.Fatalf("%d lines from %d bytes", lines, len(data))
			}
			_, err := r.next()
			if errors.Is(err, errQMPLine) {
				continue
			}
			if err != nil {
				if err != io.EOF && len(data) <= qmpMaxLine {
					t.Fatalf("error on %d bytes: %v", len(data), err)
				}
				return
			}
		}
	})
}
