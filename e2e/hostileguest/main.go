// Command hostileguest is the attacker of the hostile-guest e2e tests: a
// static program uploaded into a sandbox and run there as root, as any
// tenant could, that attacks what the host reads from its guest. Each mode
// runs for -dur and then prints one summary line; nothing in it is built
// into spaced or the agent.
//
//	egress        many connections to the egress proxy, each streaming one endless header
//	dns           random-subdomain queries over UDP as fast as it can, and TCP/53 connections held open
//	console       lines written without pause to /dev/console, /dev/kmsg and the serial port
//	link-ping     takes the agent link over (link.go) and floods it with yamux pings, never reading
//	link-streams  takes the agent link over and opens streams the host never accepts, filling their windows
//	link-lies     takes the agent link over and answers the host as a lying agent (lies.go)
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

func main() {
	dur := flag.Duration("dur", 15*time.Second, "how long the attack runs")
	conns := flag.Int("conns", 64, "egress: connections; dns: TCP/53 connections; link-streams: streams")
	target := flag.String("target", "172.31.0.1", "address dialled (the guest's gateway: the egress proxy and DNS answer there)")
	zone := flag.String("zone", "example.com", "dns: the zone random names are made under")
	delay := flag.Duration("delay", 0, "wait before the attack (lets the command's start reach the host first)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: hostileguest [flags] egress|dns|console|link-ping|link-streams|link-lies")
		os.Exit(2)
	}
	time.Sleep(*delay)
	// A write blocked on a device or a full link does not outlive the run.
	time.AfterFunc(*dur+5*time.Second, func() {
		fmt.Println(flag.Arg(0), "ended by its watchdog, a write still blocked")
		note("%s ended by its watchdog, a write still blocked", flag.Arg(0))
		os.Exit(0)
	})
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var summary string
	var err error
	switch mode := flag.Arg(0); mode {
	case "egress":
		summary = egress(ctx, *target, *conns)
	case "dns":
		summary = dnsFlood(ctx, *target, *zone, *conns)
	case "console":
		summary = console(ctx)
	case "link-ping":
		summary, err = linkAttack(ctx, pingFlood)
	case "link-lies":
		summary, err = linkAttack(ctx, lyingAgent)
	case "link-streams":
		summary, err = linkAttack(ctx, func(ctx context.Context, c net.Conn) string { return streamFlood(ctx, c, *conns) })
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostileguest:", err)
		note("%s failed: %v", flag.Arg(0), err)
		os.Exit(1)
	}
	fmt.Println(flag.Arg(0), summary)
	note("%s %s", flag.Arg(0), summary)
}

// note writes one line to the kernel log too, which reaches the VM's
// console file on the host: the only way a link attack, having frozen the
// agent, can still tell the test what it did.
func note(format string, args ...any) {
	if f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		fmt.Fprintf(f, "hostileguest: "+format+"\n", args...)
		f.Close()
	}
}

// egress opens n connections through the proxy, each sending a request
// line and one header whose value never ends, and keeps them streaming;
// a connection the proxy closes is redialled.
func egress(ctx context.Context, target string, n int) string {
	var sent, dials, closed atomic.Int64
	var wg sync.WaitGroup
	chunk := bytes.Repeat([]byte("a"), 16<<10)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort(target, "80"))
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				dials.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: allowed.example\r\nX-Endless: "))
				for err == nil && ctx.Err() == nil {
					var k int
					k, err = c.Write(chunk)
					sent.Add(int64(k))
				}
				if ctx.Err() == nil {
					closed.Add(1)
				}
				stop()
				c.Close()
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("conns=%d dials=%d closed_by_host=%d header_bytes=%d", n, dials.Load(), closed.Load(), sent.Load())
}

// dnsFlood sends A queries for random names under zone over UDP from a few
// sockets as fast as they go (answers read and dropped), while tcpConns
// TCP/53 connections are held open, each sending a query now and then.
func dnsFlood(ctx context.Context, target, zone string, tcpConns int) string {
	addr := net.JoinHostPort(target, "53")
	var udpSent, udpAnswers, tcpOpen, tcpDials atomic.Int64
	var wg sync.WaitGroup
	query := func() []byte {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("%016x.%s.", rand.Uint64(), strings.TrimSuffix(zone, ".")), dns.TypeA)
		b, _ := m.Pack()
		return b
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("udp4", addr)
			if err != nil {
				return
			}
			defer c.Close()
			context.AfterFunc(ctx, func() { c.Close() })
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					udpAnswers.Add(1)
				}
			}()
			for ctx.Err() == nil {
				if _, err := c.Write(query()); err == nil {
					udpSent.Add(1)
				}
			}
		}()
	}
	for range tcpConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp4", addr)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				tcpDials.Add(1)
				tcpOpen.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				for ctx.Err() == nil {
					q := query()
					frame := append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)
					if _, err := c.Write(frame); err != nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				stop()
				c.Close()
				tcpOpen.Add(-1)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("udp_sent=%d udp_answers=%d tcp_conns=%d tcp_dials=%d", udpSent.Load(), udpAnswers.Load(), tcpConns, tcpDials.Load())
}

// console writes lines without pause to every console device the guest
// has, from one goroutine each; a device that cannot be opened is skipped.
func console(ctx context.Context) string {
	line := append(bytes.Repeat([]byte("flood "), 170), '\n') // ~1 KiB
	short := line[len(line)-200:]                             // /dev/kmsg takes lines under 1 KiB
	devs := []string{"/dev/console", "/dev/kmsg", "/dev/ttyS0", "/dev/hvc0"}
	written := make([]atomic.Int64, len(devs))
	var wg sync.WaitGroup
	for i, dev := range devs {
		f, err := os.OpenFile(dev, os.O_WRONLY, 0)
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.Close()
			l := line
			if dev == "/dev/kmsg" {
				l = short
			}
			for ctx.Err() == nil {
				n, err := f.Write(l)
				written[i].Add(int64(n))
				if err != nil {
					time.Sleep(time.Millisecond) // /dev/kmsg refuses when its ring is busy
				}
			}
		}()
	}
	wg.Wait()
	var b strings.Builder
	for i, dev := range devs {
		fmt.Fprintf(&b, "%s=%d ", dev, written[i].Load())
	}
	return strings.TrimSpace(b.String())
}
