package agent

import (
	"bytes"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/agentproto"
)

// Lines as a Linux 6.x kernel writes them (x86_64).
const (
	tcp4Table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23311 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1340 1 00000000719b0a6d 100 0 0 10 0
   2: 0100007F:9925 0100007F:96D2 06 00000000:00000000 03:0000144E 00000000     0        0 0 3 00000000d4e43cda
   3: 0200A8C0:D2F0 0101A8C0:01BB 01 00000000:00000000 02:00000A3C 00000000  1000        0 99811 2 0000000000000000 20 4 30 10 -1
   4: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1341 1 00000000719b0a6e 100 0 0 10 0
`
	tcp6Table = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23456 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0277 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23457 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23458 1 0000000000000000 100 0 0 10 0
   3: B80D01200000000000000000FE000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23459 1 0000000000000000 100 0 0 10 0
   4: 00000000000000000000000001000000:A1B2 00000000000000000000000001000000:0277 01 00000000:00000000 00:00000000 00000000     0        0 23460 1 0000000000000000 100 0 0 10 0
`
)

func TestParseProcNetTCP(t *testing.T) {
	for _, tc := range []struct {
		name, table string
		want        []agentproto.ListeningPort
	}{
		{"ipv4", tcp4Table, []agentproto.ListeningPort{
			{Port: 8080, Address: "127.0.0.1"}, {Port: 22, Address: "0.0.0.0"}, {Port: 22, Address: "0.0.0.0"},
		}},
		{"ipv6", tcp6Table, []agentproto.ListeningPort{
			{Port: 8080, Address: "::"}, {Port: 631, Address: "::1"},
			{Port: 8081, Address: "::ffff:127.0.0.1"}, {Port: 80, Address: "2001:db8::fe"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcNetTCP(strings.NewReader(tc.table), maxListeningPorts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestSortPortsDedups(t *testing.T) {
	ipv4, _ := parseProcNetTCP(strings.NewReader(tcp4Table), maxListeningPorts)
	ipv6, _ := parseProcNetTCP(strings.NewReader(tcp6Table), maxListeningPorts)
	got := sortPorts(append(ipv4, ipv6...))
	want := []agentproto.ListeningPort{
		{Port: 22, Address: "0.0.0.0"}, {Port: 80, Address: "2001:db8::fe"}, {Port: 631, Address: "::1"},
		{Port: 8080, Address: "127.0.0.1"}, {Port: 8080, Address: "::"}, {Port: 8081, Address: "::ffff:127.0.0.1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got := sortPorts(nil); got == nil || len(got) != 0 {
		t.Errorf("sortPorts(nil) = %#v, want an empty list (JSON [])", got)
	}
}

func TestParseProcNetTCPSkipsMalformed(t *testing.T) {
	lines := []string{
		"garbage",
		"   0: ZZ00007F:1F90 00000000:0000 0A", // not hex
		"   0: 0100007F:1F9 00000000:0000 0A",  // short port
		"   0: 0100007F1F90 00000000:0000 0A",  // no colon
		"   0: 00007F:1F90 00000000:0000 0A",   // short address
		"   0: 0100007F:0000 00000000:0000 0A", // port 0
		"   0: 0100007F:1F90 00000000:0000",    // no state
		"   0: 0100007F:1F90 00000000:0000 0A" + strings.Repeat(" 0", maxProcNetLine), // overlong
		"   0: 0100007F:+F90 00000000:0000 0A",                                        // a sign is not hex
		"   0: 0100007F:1F90 00000000:0000 0a",                                        // the kernel writes upper case
		"",
		"   1: 0200007F:0050 00000000:0000 0A 00000000:00000000", // the one good line, after all that
	}
	got, err := parseProcNetTCP(strings.NewReader(strings.Join(lines, "\n")), maxListeningPorts)
	if err != nil {
		t.Fatal(err)
	}
	want := []agentproto.ListeningPort{{Port: 80, Address: "127.0.0.2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// repeatReader repeats a line without end.
type repeatReader struct {
	line []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.line[r.off:])
		n += c
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}

func TestParseProcNetTCPBounded(t *testing.T) {
	// Endless listening lines: at most max entries.
	listen := &repeatReader{line: []byte("   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n")}
	got, err := parseProcNetTCP(listen, 10)
	if err != nil || len(got) != 10 {
		t.Fatalf("got %d entries, %v; want 10", len(got), err)
	}
	// Endless other lines, and an endless line: at most the bytes allowed.
	for _, line := range []string{"   1: 0100007F:9925 0100007F:96D2 06 00000000:00000000\n", "0A "} {
		r := &countReader{r: io.LimitReader(&repeatReader{line: []byte(line)}, maxProcNetBytes)}
		got, err := parseProcNetTCP(r, maxListeningPorts)
		if err != nil || len(got) != 0 {
			t.Fatalf("%q: got %v, %v; want nothing", line, got, err)
		}
		if r.n != maxProcNetBytes {
			t.Errorf("%q: read %d bytes, want the bound %d", line, r.n, maxProcNetBytes)
		}
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestListPortsReadsThisMachine(t *testing.T) {
	// The tables of the machine the test runs on parse (whatever is
	// listening): the real format, not only the samples above.
	l, err := listPorts()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Ports {
		if p.Port == 0 || !netip.MustParseAddr(p.Address).IsValid() {
			t.Errorf("bad entry %v", p)
		}
	}
}

// FuzzParseProcNetTCP feeds arbitrary tables to the parser: it must not
// panic, return more than max entries, or return an entry that is not a
// valid address and non-zero port.
func FuzzParseProcNetTCP(f *testing.F) {
	f.Add([]byte(tcp4Table))
	f.Add([]byte(tcp6Table))
	f.Add([]byte("0: 0100007F:1F90 0 0A\n" + strings.Repeat("x", 2*maxProcNetLine) + "\n1: 00000000:0016 0 0A"))
	f.Fuzz(func(t *testing.T, table []byte) {
		const max = 8
		got, err := parseProcNetTCP(bytes.NewReader(table), max)
		if err != nil {
			t.Fatalf("a reader of bytes failed: %v", err)
		}
		if len(got) > max {
			t.Fatalf("%d entries, max %d", len(got), max)
		}
		for _, p := range got {
			a, err := netip.ParseAddr(p.Address)
			if err != nil || p.Port == 0 {
				t.Fatalf("bad entry %v (%v)", p, err)
			}
			if !bytes.Contains(bytes.ToUpper(table), []byte(":"+strings.ToUpper(hex4(p.Port)))) {
				t.Fatalf("port %d of %q is not in the table", p.Port, a)
			}
		}
	})
}

func hex4(p uint16) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[p>>12], digits[p>>8&0xf], digits[p>>4&0xf], digits[p&0xf]})
}
