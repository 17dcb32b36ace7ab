package cluster

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/worker"
)

// SeaweedFS SIGKILLed (by the PID cluster.json records) while a suspend
// uploads the sandbox's snapshot — the kill waits until the upload's first
// chunks are in the bucket — and started again: the suspend ends failed
// unavailable, the sandbox runs on and answers exec with its files, no
// manifest names the cut upload, and a second suspend succeeds. A wake
// while the object store is down fails unavailable and leaves the sandbox
// suspended with no Pod; after the restart it wakes with its files.
func TestObjectStoreKilledMidUpload(t *testing.T) {
	r := replica(t, 0)
	bucket, objs := bucketClient(t), objectStore(t)
	sb := r.create(map[string]any{"template": "base", "vcpus": 1, "memory_mib": 256})
	// 48 MiB of incompressible data on the disk and in the page cache: an
	// upload that lasts long enough to be cut.
	sum := r.putRandomFile(sb.ID, "/root/fill", 48<<20) + "  /root/fill\n"
	if got := r.exec(sb.ID, "sync && md5sum /root/fill"); got != sum {
		t.Fatalf("the uploaded file's sum in the guest: %q, want %q", got, sum)
	}

	before := chunkCount(t, bucket)
	var out apiv1.SandboxAndOperation
	if code := r.do("POST", "/v1/sandboxes/"+sb.ID+"/suspend", nil, &out); code != http.StatusAccepted {
		t.Fatalf("suspend: HTTP %d", code)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for chunkCount(t, bucket) <= before {
		var op apiv1.Operation
		if r.do("GET", "/v1/operations/"+out.Operation.ID, nil, &op); op.DoneAt != nil {
			t.Fatalf("the suspend ended %s before any chunk of its upload was seen: nothing to cut", op.State)
		}
		if time.Now().After(deadline) {
			t.Fatal("no chunk of the suspend's upload appeared within 3 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	killObjectStore(t)
	op := r.waitOperation(out.Operation.ID, 5*time.Minute)
	if op.State != "failed" || op.Error == nil || op.Error.Code != errdefs.ErrUnavailable.Code() {
		t.Fatalf("the cut suspend ended %s (%s), want failed unavailable", op.State, errorOf(op))
	}
	restartObjectStore(t)
	if got := settled(t, r, sb.ID, "running"); got.Worker != sb.Worker {
		t.Errorf("after the cut suspend the sandbox runs on %q, was on %s", got.Worker, sb.Worker)
	}
	if got := r.exec(sb.ID, "md5sum /root/fill"); got != sum {
		t.Fatalf("after the cut suspend the file's sum is %q, was %q", got, sum)
	}
	name := worker.SuspendSnapshot(sb.ID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := objs.StatSnapshot(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after the cut upload %s: %v, want no manifest (not_found)", name, err)
	}

	lifecycle(t, r, sb.ID, "suspend")
	if _, err := objs.StatSnapshot(ctx, name); err != nil {
		t.Fatalf("the second suspend stored no snapshot: %v", err)
	}

	killObjectStore(t)
	if code := r.do("POST", "/v1/sandboxes/"+sb.ID+"/wake", nil, &out); code != http.StatusAccepted {
		t.Fatalf("wake with the object store down: HTTP %d", code)
	}
	op = r.waitOperation(out.Operation.ID, 5*time.Minute)
	if op.State != "failed" || op.Error == nil || op.Error.Code != errdefs.ErrUnavailable.Code() {
		t.Errorf("a wake with the object store down ended %s (%s), want failed unavailable", op.State, errorOf(op))
	}
	if got := settled(t, r, sb.ID, "suspended", "failed", "running"); got.State != "suspended" || got.Worker != "" {
		t.Fatalf("after a wake with the object store down: %s on %q (%v), want suspended on no worker", got.State, got.Worker, got.LastError)
	}
	waitNoPod(t, sb.ID)
	restartObjectStore(t)
	lifecycle(t, r, sb.ID, "wake")
	if got := r.exec(sb.ID, "md5sum /root/fill"); got != sum {
		t.Fatalf("woken after the outage, the file's sum is %q, was %q", got, sum)
	}
}

// putRandomFile writes n random bytes to path in the sandbox through the
// files API and returns their md5 (hex).
func (a *api) putRandomFile(id, path string, n int) string {
	a.t.Helper()
	data := make([]byte, n)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "PUT", a.url+"/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(path), bytes.NewReader(data))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.ContentLength = int64(n)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("put %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		a.t.Fatalf("put %s: HTTP %d", path, resp.StatusCode)
	}
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:])
}

// weedDown is true while a case holds SeaweedFS down.
var weedDown bool

// killObjectStore SIGKILLs SeaweedFS; the case's end starts it again if
// the case did not.
func killObjectStore(t *testing.T) {
	t.Helper()
	if err := cl.KillObjectStore(); err != nil {
		t.Fatal(err)
	}
	weedDown = true
	t.Cleanup(func() {
		if weedDown {
			restartObjectStore(t)
		}
	})
}

func restartObjectStore(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cl.RestartObjectStore(ctx); err != nil {
		t.Fatalf("restart SeaweedFS: %v", err)
	}
	weedDown = false
}

// bucketClient is a minio client on the cluster's bucket, for what the
// test reads straight from the bucket (not through the code under test).
func bucketClient(t *testing.T) *minio.Client {
	t.Helper()
	loc, err := objstore.ParseURL(cl.Info.S3)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := objstore.LoadCredentials(cl.Info.S3CredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(loc.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(creds.AccessKey, creds.SecretKey, ""),
		BucketLookup: minio.BucketLookupPath, Region: "us-east-1", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// chunkCount is how many chunk objects the bucket holds.
func chunkCount(t *testing.T, c *minio.Client) int {
	t.Helper()
	loc, _ := objstore.ParseURL(cl.Info.S3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := strings.TrimPrefix(loc.Prefix+"/chunks/", "/")
	n := 0
	for o := range c.ListObjects(ctx, loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list chunks: %v", o.Err)
		}
		n++
	}
	return n
}
