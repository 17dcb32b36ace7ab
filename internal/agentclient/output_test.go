package agentclient_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/space-sandbox/space/internal/agentproto"
)

// BenchmarkStdout streams 16 MiB of a process's stdout through an agent in
// test mode; the bytes per op make -bench print throughput.
func BenchmarkStdout(b *testing.B) {
	e := newEnv(b)
	ctx := ctxT(b)
	const mib = 16
	b.SetBytes(mib << 20)
	for i := 0; i < b.N; i++ {
		r := run(b, ctx, e.c, agentproto.ProcessSpec{ID: fmt.Sprintf("b%d", i),
			Shell: fmt.Sprintf("head -c %d /dev/zero", mib<<20), BufferBytes: 64 << 20})
		if r.stdout.Len() != mib<<20 {
			b.Fatalf("got %d bytes", r.stdout.Len())
		}
	}
}

// Bulk output arrives complete, in events of at most MaxEventChunk, in
// order; a reader resuming mid-stream gets exactly the rest.
func TestBulkOutput(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const size = 5<<20 + 123
	r := run(t, ctx, e.c, agentproto.ProcessSpec{ID: "bulk",
		Shell: fmt.Sprintf("head -c %d /dev/urandom | tee %s/bulk", size, e.root), BufferBytes: 16 << 20})
	if exitCode(t, r) != 0 || r.stdout.Len() != size {
		t.Fatalf("exit %+v, %d stdout bytes", r.exit, r.stdout.Len())
	}
	want, err := os.ReadFile(filepath.Join(e.root, "bulk"))
	if err != nil || !bytes.Equal(r.stdout.Bytes(), want) {
		t.Fatalf("stdout differs from what the process wrote (%v)", err)
	}
	checkSeqs(t, r.events, 1)
	for _, ev := range r.events {
		if len(ev.Data) > agentproto.MaxEventChunk {
			t.Fatalf("event %d has %d bytes", ev.Seq, len(ev.Data))
		}
	}
	mid := r.events[len(r.events)/2]
	rest := collect(t, ctx, e.c, "bulk", mid.Seq)
	var tail []byte
	for _, ev := range r.events[len(r.events)/2+1:] {
		tail = append(tail, ev.Data...)
	}
	if !bytes.Equal(rest.stdout.Bytes(), tail) {
		t.Fatalf("resumed after %d: %d bytes, want %d", mid.Seq, rest.stdout.Len(), len(tail))
	}
}
