package agentclient_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/agentclient"
	"github.com/space-sandbox/space/internal/agentproto"
)

// TestOnLinkAbuseCounts: a guest that opens a stream of its own (which the
// host never accepts) has its link dropped, and the client's owner is told
// once per dropped link, so the worker can count it.
func TestOnLinkAbuseCounts(t *testing.T) {
	dial := func(ctx context.Context) (net.Conn, error) {
		host, guest := net.Pipe()
		go func() {
			defer guest.Close()
			synced, err := agentproto.AgentSync(context.Background(), guest)
			if err != nil {
				return
			}
			sess, err := agentproto.AgentSession(synced)
			if err != nil {
				return
			}
			defer sess.Close()
			// Nothing else this guest does breaks a bound: opening a
			// stream (its first frame) is what the host drops it for.
			if st, err := sess.OpenStream(); err == nil {
				_, _ = st.Write([]byte("x"))
			}
			<-sess.CloseChan()
		}()
		return host, nil
	}
	c := agentclient.New(dial, nil)
	defer c.Close()
	abused := make(chan struct{}, 4)
	c.OnLinkAbuse(func() { abused <- struct{}{} })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _, _ = c.Ping(ctx) }() // dials; the guest then opens its stream
	select {
	case <-abused:
	case <-ctx.Done():
		t.Fatal("the link of a guest that opened a stream was not reported as abuse")
	}
}
