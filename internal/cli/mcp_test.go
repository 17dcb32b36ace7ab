package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func TestMCPNeedsAKey(t *testing.T) {
	t.Setenv("SPACE_API_KEY", "")
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"mcp"}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out.Len() != 0 || !strings.Contains(errb.String(), "SPACE_API_KEY") {
		t.Errorf("stdout %q, stderr %q", out.String(), errb.String())
	}
	if code := Run(context.Background(), []string{"mcp", "extra"}, Env{Stdout: &out, Stderr: &errb}); code != 2 {
		t.Errorf("space mcp extra: exit %d, want 2", code)
	}
}

// TestMCPStdio serves one session over pipes: stdout carries only JSON-RPC
// answers, and the session ends when stdin does.
func TestMCPStdio(t *testing.T) {
	t.Setenv("SPACE_API_KEY", "k")
	t.Setenv("SPACE_URL", "http://127.0.0.1:1")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), []string{"mcp"}, Env{Stdin: inR, Stdout: outW, Stderr: io.Discard})
		outW.Close()
	}()
	go func() {
		io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
		io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`+"\n")
	}()
	dec := json.NewDecoder(outR)
	for id := 1; id <= 2; id++ {
		var msg struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      int             `json:"id"`
			Result  json.RawMessage `json:"result"`
		}
		if err := dec.Decode(&msg); err != nil {
			t.Fatalf("stdout is not JSON-RPC: %v", err)
		}
		if msg.JSONRPC != "2.0" || msg.ID != id || len(msg.Result) == 0 {
			t.Fatalf("answer %d: %+v", id, msg)
		}
		if id == 2 && !strings.Contains(string(msg.Result), `"run_command"`) {
			t.Errorf("tools/list lacks run_command: %s", msg.Result)
		}
	}
	inW.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after stdin closed", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("space mcp did not end when stdin closed")
	}
}
