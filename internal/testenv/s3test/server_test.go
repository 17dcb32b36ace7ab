package s3test_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

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

// TestRestartAfterKill: weed SIGKILLed by its PID refuses connections; on
// restart it serves the same endpoint, bucket and objects.
func TestRestartAfterKill(t *testing.T) {
	srv := s3test.New(t, "crash")
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := strings.Repeat("kept ", 1000)
	if _, err := client.PutObject(ctx, "crash", "k", strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := srv.PID
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", srv.Endpoint, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s accepts connections after the kill", srv.Endpoint)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.PID == pid {
		t.Fatalf("the restarted weed has the old pid %d", pid)
	}
	obj, err := client.GetObject(ctx, "crash", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil || string(got) != body {
		t.Fatalf("after the restart the object reads %d bytes, %v", len(got), err)
	}
}
