package egress

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// httpIdle bounds how long a kept-alive guest connection may sit idle.
const httpIdle = 5 * time.Minute

// serveHTTP proxies HTTP/1.x request by request: each request is judged
// by its own Host under the policy current at that moment, sent to the
// address the platform resolved for that Host, and given the credentials its
// domain's inject rules name; responses are scrubbed of those credentials.
// g is the guest's side: the raw connection for plain HTTP, or the
// terminated TLS connection when intercepting (secure), in which case each
// upstream is reached over TLS verified for the request's Host.
// br reads g through lim, which bounds each request's header.
func (c *proxyConn) serveHTTP(g net.Conn, br *bufio.Reader, lim *readLimit, secure bool) {
	sb := c.sb
	port := c.dst.Port()
	kind := "http"
	if secure {
		kind = "https"
	}
	var up net.Conn
	var upBR *bufio.Reader
	var upLim *readLimit
	var upName, upAddr string
	// One writer each way for the connection's life, not one per request:
	// a request's header goes upstream in one write, a response's header
	// and what of its body is at hand to the guest in one write.
	upW := bufio.NewWriterSize(nil, 4<<10)
	gw := bufio.NewWriterSize(g, 16<<10)
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	for {
		// A kept-alive connection may idle between requests; once a
		// request has begun, its header must come whole, and soon.
		if br.Buffered() == 0 {
			_ = g.SetReadDeadline(time.Now().Add(httpIdle))
			if _, err := br.Peek(1); err != nil {
				return
			}
		}
		_ = g.SetReadDeadline(time.Now().Add(sb.svc.cfg.HeaderTimeout))
		req, code, why := readRequest(br, lim, sb.svc.cfg.MaxHeaderBytes)
		if req == nil {
			if code != 0 {
				sb.record(Record{Kind: kind, Destination: c.dst.String(), Rule: why})
				writeStatus(g, nil, code, "egress: "+why+"\n")
				hangUp(g)
			}
			return
		}
		_ = g.SetReadDeadline(time.Time{})
		host, name := requestName(req)
		r := sb.rules.Load()
		rec := Record{Kind: kind, Destination: net.JoinHostPort(host, strconv.Itoa(int(port)))}
		if name == "" {
			rec.Rule = "no host name"
			if ok, rule := r.decideAddr(c.dst.Addr()); ok {
				rec.Rule = rule + " (HTTP by address needs a CIDR rule)"
			}
			sb.record(rec)
			deny(g, req)
			return
		}
		ok, rule := r.decideName(name)
		rec.Rule = rule
		if !ok {
			sb.record(rec)
			deny(g, req)
			return
		}
		if up == nil || name != upName {
			if up != nil {
				up.Close()
			}
			conn, addr, why := sb.dialName(sb.ctx, r, name, port)
			if conn != nil && secure {
				conn, why = sb.upstreamTLS(sb.ctx, conn, name)
			}
			if conn == nil {
				rec.Rule = why
				sb.record(rec)
				msg := "egress: upstream unavailable\n"
				if why == whyUntrusted {
					msg = "egress: upstream certificate not trusted\n"
				}
				writeStatus(g, req, http.StatusBadGateway, msg)
				return
			}
			if c.setUpstream(kind, name, conn) != nil {
				conn.Close()
				return
			}
			upLim = &readLimit{r: &countReader{r: conn, n: &c.in}, n: -1}
			up, upBR, upName, upAddr = conn, bufio.NewReader(upLim), name, addr
			upW.Reset(&countWriter{w: conn, n: &c.out})
		}
		rec.Upstream = upAddr
		secrets, injected, err := c.inject(sb.ctx, r, name, req)
		rec.Injected = injected
		if err != nil {
			rec.Rule = "credential unavailable"
			sb.record(rec)
			writeStatus(g, req, http.StatusBadGateway, "egress: credential unavailable\n")
			return
		}
		rec.Allowed = true
		out0, in0 := c.out.Load(), c.in.Load()
		p := sb.record(rec)
		keep := c.roundTrip(g, gw, req, br, up, upW, upBR, upLim, secrets)
		sb.audit.update(p, c.out.Load()-out0, c.in.Load()-in0)
		if !keep {
			return
		}
	}
}

// inject sets the headers of every inject rule for name and returns the
// resolved values to scrub from the response.
func (c *proxyConn) inject(ctx context.Context, r *rules, name string, req *http.Request) ([]string, []string, error) {
	rules := r.injectionsFor(name)
	if len(rules) == 0 {
		return nil, nil, nil
	}
	var secrets, headers []string
	for _, in := range rules {
		var v strings.Builder
		for _, p := range in.value.parts {
			if p.secret == "" {
				v.WriteString(p.lit)
				continue
			}
			s, err := c.sb.secrets(ctx, p.secret)
			if err != nil {
				c.sb.log.Warn("egress: resolve secret", "secret", p.secret, "err", err)
				return nil, headers, err
			}
			if strings.ContainsAny(s, "\r\n\x00") {
				return nil, headers, fmt.Errorf("secret %q holds a line break", p.secret)
			}
			secrets = append(secrets, s)
			v.WriteString(s)
		}
		req.Header.Set(in.header, v.String())
		secrets = append(secrets, v.String())
		headers = append(headers, in.header)
	}
	// Compressed echoes would hide the value from the scrubber.
	req.Header.Set("Accept-Encoding", "identity")
	return secrets, headers, nil
}

// roundTrip sends req upstream through upW (up's writer, empty) and streams
// the response back through gw (g's writer, empty), scrubbed; upBR reads
// up through upLim, which bounds the response's header. It reports
// whether the guest connection may carry another request.
func (c *proxyConn) roundTrip(g net.Conn, gw *bufio.Writer, req *http.Request, guestBR *bufio.Reader, up net.Conn, upW *bufio.Writer, upBR *bufio.Reader, upLim *readLimit, secrets []string) bool {
	req.Header.Del("Expect") // no 100-continue dance through the proxy
	req.Header.Del("Proxy-Connection")
	// (Request.Write on a *bufio.Writer leaves the flush to its caller; a
	// chunked body is flushed chunk by chunk, as with its own writer.)
	if err := req.Write(upW); err != nil || upW.Flush() != nil {
		writeStatus(g, req, http.StatusBadGateway, "egress: upstream write failed\n")
		return false
	}
	upLim.header(c.sb.svc.cfg.MaxHeaderBytes, upBR.Buffered())
	resp, err := http.ReadResponse(upBR, req)
	tooLarge := upLim.hit
	upLim.unlimited()
	if err != nil {
		msg := "egress: bad upstream response\n"
		if tooLarge {
			msg = "egress: upstream response header too large\n"
		}
		writeStatus(g, req, http.StatusBadGateway, msg)
		return false
	}
	defer resp.Body.Close()
	sc := newScrubber(secrets)
	if sc != nil {
		for k, vs := range resp.Header {
			for i := range vs {
				vs[i] = sc.scrubString(vs[i])
			}
			resp.Header[k] = vs
		}
		resp.Trailer = nil
		switch enc := strings.ToLower(resp.Header.Get("Content-Encoding")); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				writeStatus(g, req, http.StatusBadGateway, "egress: bad upstream encoding\n")
				return false
			}
			resp.Body = struct {
				io.Reader
				io.Closer
			}{zr, resp.Body}
			resp.Header.Del("Content-Encoding")
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
			resp.TransferEncoding = []string{"chunked"}
		default:
			writeStatus(g, req, http.StatusBadGateway, "egress: upstream encoding not scrubbable\n")
			return false
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{sc.reader(resp.Body), resp.Body}
	}
	// Response.Write makes a write per header field, each a segment to the
	// guest (and, with a VM, a frame through its NIC): the header and what
	// of the body is at hand are gathered and sent together, and flushed
	// before any read of the body that could wait on the upstream, so a
	// streamed response is never held back.
	resp.Body = &flushBeforeWait{r: resp.Body, w: gw, src: upBR, always: sc != nil}
	// (Written through a plain Writer: bufio's ReadFrom would have the body
	// read into its buffer, which the flush before the read would reset.)
	if err := resp.Write(struct{ io.Writer }{gw}); err != nil {
		return false
	}
	if err := gw.Flush(); err != nil {
		return false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		var from io.Reader = upBR
		if sc != nil {
			from = sc.reader(upBR)
		}
		done := make(chan struct{})
		go func() { defer close(done); io.Copy(g, from); closeWrite(g) }()
		io.Copy(&countWriter{w: up, n: &c.out}, guestBR)
		closeWrite(up)
		<-done
		return false
	}
	return !req.Close && !resp.Close
}

func deny(w io.Writer, req *http.Request) {
	writeStatus(w, req, http.StatusForbidden, "egress: blocked by the sandbox's network policy\n")
}

func writeStatus(w io.Writer, req *http.Request, code int, body string) {
	resp := &http.Response{
		StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Connection": {"close"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Close: true,
	}
	_ = resp.Write(w)
}

// flushBeforeWait is a response body that flushes w before every read that
// could block: when src (the upstream's reader) holds no buffered bytes,
// or always (a decoder or scrubber between them may read more than src
// holds).
type flushBeforeWait struct {
	r      io.ReadCloser
	w      *bufio.Writer
	src    *bufio.Reader
	always bool
}

func (f *flushBeforeWait) Read(p []byte) (int, error) {
	if f.w.Buffered() > 0 && (f.always || f.src.Buffered() == 0) {
		if err := f.w.Flush(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}

func (f *flushBeforeWait) Close() error { return f.r.Close() }

type countReader struct {
	r io.Reader
	n interface{ Add(int64) int64 }
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countWriter struct {
	w io.Writer
	n interface{ Add(int64) int64 }
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
