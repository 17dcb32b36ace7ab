package s3test_test

import (
	"context"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/testenv/s3test"
)

// TestStartAndStop: the server answers S3 with its bucket made, and Stop
// ends the process and frees its port.
func TestStartAndStop(t *testing.T) {
	srv := s3test.New(t, "probe")
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ok, err := client.BucketExists(ctx, "probe"); err != nil || !ok {
		t.Fatalf("BucketExists(probe) = %v, %v", ok, err)
	}
	if u, err := url.Parse(srv.URL()); err != nil || u.Host != "probe" || u.Query().Get("endpoint") != srv.Endpoint {
		t.Errorf("URL %s (%v)", srv.URL(), err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.Exited():
	default:
		t.Fatal("Stop returned with weed still running")
	}
	if err := syscall.Kill(srv.PID, 0); err != syscall.ESRCH {
		t.Errorf("pid %d after Stop: %v, want no such process", srv.PID, err)
	}
	if c, err := net.DialTimeout("tcp", srv.Endpoint, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", srv.Endpoint)
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
