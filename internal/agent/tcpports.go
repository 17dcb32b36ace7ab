package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/errdefs"
)

// The kernel's tables of TCP sockets, one line per socket (the listening
// ones and every connection).
var procNetTCP = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// Bounds on what listPorts reads: the tables list every connection too, so
// a guest with many of them must not make the agent read without end, nor
// answer more than a frame holds.
const (
	maxProcNetBytes   = 8 << 20 // per table
	maxProcNetLine    = 512     // a line is ~150 bytes; longer ones are skipped
	maxListeningPorts = 4096    // entries in one answer (~50 bytes of JSON each)
)

// tcpListen is the state column of a listening socket (TCP_LISTEN).
const tcpListen = "0A"

// listPorts lists the TCP sockets listening in the guest, IPv4 and IPv6,
// one entry per port and address, sorted by port then address.
func listPorts() (agentproto.PortList, error) {
	var all []agentproto.ListeningPort
	for _, path := range procNetTCP {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return agentproto.PortList{}, errdefs.New(errdefs.ErrInternal, "read the guest's TCP table").WithCause(err)
		}
		ports, err := parseProcNetTCP(io.LimitReader(f, maxProcNetBytes), maxListeningPorts-len(all))
		_ = f.Close()
		if err != nil {
			return agentproto.PortList{}, errdefs.New(errdefs.ErrInternal, "read the guest's TCP table").WithCause(err)
		}
		all = append(all, ports...)
	}
	return agentproto.PortList{Ports: sortPorts(all)}, nil
}

// sortPorts sorts by port then address and drops duplicates (several
// sockets on one address and port, as SO_REUSEPORT makes).
func sortPorts(ps []agentproto.ListeningPort) []agentproto.ListeningPort {
	slices.SortFunc(ps, func(a, b agentproto.ListeningPort) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Address, b.Address))
	})
	ps = slices.Compact(ps)
	if ps == nil {
		ps = []agentproto.ListeningPort{}
	}
	return ps
}

// parseProcNetTCP reads a /proc/net/tcp or /proc/net/tcp6 table and
// returns its listening sockets, at most max of them. Lines it does not
// understand (the header, malformed or overlong ones) are skipped.
func parseProcNetTCP(r io.Reader, max int) ([]agentproto.ListeningPort, error) {
	br := bufio.NewReaderSize(r, maxProcNetLine)
	var out []agentproto.ListeningPort
	for len(out) < max {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if err = skipLine(br); err != nil && err != io.EOF {
				return out, err
			}
			if err == io.EOF {
				return out, nil
			}
			continue
		}
		if p, ok := parseListenLine(line); ok {
			out = append(out, p)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// skipLine reads to the end of an overlong line.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// parseListenLine parses one table line,
//
//	"  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 ...",
//
// and says whether it is a well-formed listening socket.
func parseListenLine(line []byte) (agentproto.ListeningPort, bool) {
	f := bytes.Fields(line)
	if len(f) < 4 || string(f[3]) != tcpListen {
		return agentproto.ListeningPort{}, false
	}
	addr, port, ok := parseHexAddrPort(f[1])
	if !ok || port == 0 {
		return agentproto.ListeningPort{}, false
	}
	return agentproto.ListeningPort{Port: port, Address: addr.String()}, true
}

// parseHexAddrPort decodes "ADDR:PORT": ADDR is 8 (IPv4) or 32 (IPv6) hex
// digits, the address's 32-bit words each printed as the kernel holds it
// (little-endian here); PORT is 4 hex digits in the usual order.
func parseHexAddrPort(s []byte) (netip.Addr, uint16, bool) {
	i := bytes.IndexByte(s, ':')
	if i < 0 || len(s)-i-1 != 4 {
		return netip.Addr{}, 0, false
	}
	port, err := strconv.ParseUint(string(s[i+1:]), 16, 16)
	if err != nil {
		return netip.Addr{}, 0, false
	}
	hexAddr := s[:i]
	if len(hexAddr) != 8 && len(hexAddr) != 32 {
		return netip.Addr{}, 0, false
	}
	var raw [16]byte
	n, err := hex.Decode(raw[:], hexAddr)
	if err != nil {
		return netip.Addr{}, 0, false
	}
	for w := 0; w < n; w += 4 {
		binary.BigEndian.PutUint32(raw[w:], binary.LittleEndian.Uint32(raw[w:]))
	}
	if n == 4 {
		return netip.AddrFrom4([4]byte(raw[:4])), uint16(port), true
	}
	return netip.AddrFrom16(raw), uint16(port), true
}
