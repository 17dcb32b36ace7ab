package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The figures of a hostile guest's floods, for the record (not tests):
//
//	go test ./internal/egress/ -run '^$' -bench 'Flood' -benchtime 1x
//
// Each reports what the flood added to this process (the egress service
// runs in it): heap in use, resident memory and goroutines, measured
// while the flood's connections or queries are still held.

type procFigures struct {
	heap, rss  uint64
	goroutines int
}

func measure() procFigures {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procFigures{heap: ms.HeapInuse, rss: vmRSS(), goroutines: runtime.NumGoroutine()}
}

// vmRSS is this process's resident set, in bytes (0 when unknown).
func vmRSS() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (b procFigures) report(tb *testing.B, after procFigures) {
	mib := func(a, b uint64) float64 { return (float64(a) - float64(b)) / (1 << 20) }
	tb.ReportMetric(mib(after.heap, b.heap), "heap-MiB-added")
	tb.ReportMetric(mib(after.rss, b.rss), "rss-MiB-added")
	tb.ReportMetric(float64(after.goroutines-b.goroutines), "goroutines-added")
}

// BenchmarkEndlessHeaderFlood: 8 guest connections (the env's MaxConns)
// each streaming one header line of up to 16 MiB, as the issue's
// reproduction did with 8 connections.
func BenchmarkEndlessHeaderFlood(b *testing.B) {
	e := newEnv(b, allowAllowed)
	const conns, each = 8, 16 << 20
	before := measure()
	var wg sync.WaitGroup
	var held []net.Conn
	for range conns {
		c, err := e.dial(context.Background(), "tcp4", e.addrA.String()+":80")
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Endless: ")
			chunk := bytes.Repeat([]byte("a"), 32<<10)
			for sent := 0; sent < each; sent += len(chunk) {
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second) // let the proxy read what is in flight: a figure, not a test
	after := measure()
	for _, c := range held {
		c.Close()
	}
	before.report(b, after)
}

// BenchmarkDNSFlood: 2000 UDP queries from one sandbox for names whose
// lookups hang, measured a second later.
func BenchmarkDNSFlood(b *testing.B) {
	res := newCountingResolver()
	svc := New(Config{Resolver: res})
	pl, _ := net.Listen("tcp4", "127.0.0.1:0")
	tl, _ := net.Listen("tcp4", "127.0.0.1:0")
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Attach(context.Background(), "flood", Listeners{Proxy: pl, DNSTCP: tl, DNSUDP: pc}, wildPolicy, nil); err != nil {
		b.Fatal(err)
	}
	defer svc.Detach(context.Background(), "flood")
	defer close(res.release)
	before := measure()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 2000
	for i := range n {
		_, _ = c.Write(queryBytes(b, uint16(i), fmt.Sprintf("n%d.slow.test.", i)))
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond) // within the socket's receive buffer
		}
	}
	time.Sleep(time.Second) // let the server read what was sent: a figure, not a test
	after := measure()
	_, total, held := res.stats("")
	before.report(b, after)
	b.ReportMetric(float64(total), "lookups-asked")
	b.ReportMetric(float64(held), "lookups-held-at-once")
}
