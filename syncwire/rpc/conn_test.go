package rpc

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wsync/wsync/internal/testutil"
)

// wsPair is a real WebSocket on loopback: the server side writes what
// write gets, the client side is returned as a Conn.
func wsPair(t *testing.T, write func(ctx context.Context, ws *websocket.Conn)) Conn {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		write(r.Context(), ws)
		ws.Close(websocket.StatusNormalClosure, "")
	}))
	t.Cleanup(hs.Close)
	ctx := testutil.Context(t, 10*time.Second)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return WebSocket(ws)
}

// TestReadMessageWhole: every size up to MaxFrameSize (on both sides of
// each buffer class) arrives whole and
// unchanged, each message in its own slice (a later read does not overwrite
// an earlier message), and a message of MaxFrameSize+1 bytes is a protocol
// error.
func TestReadMessageWhole(t *testing.T) {
	sizes := []int{1, 3, 511, 512, 513, 4096, 64<<10 - 1, 64 << 10, 64<<10 + 1, 256 << 10, 256<<10 + 1, 1 << 20, MaxFrameSize}
	msg := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + n)
		}
		return b
	}
	c := wsPair(t, func(ctx context.Context, ws *websocket.Conn) {
		for _, n := range sizes {
			if ws.Write(ctx, websocket.MessageBinary, msg(n)) != nil {
				return
			}
		}
		ws.Write(ctx, websocket.MessageBinary, msg(MaxFrameSize+1))
	})
	ctx := testutil.Context(t, 10*time.Second)
	var got [][]byte
	for _, n := range sizes {
		b, err := c.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("message of %d bytes: %v", n, err)
		}
		got = append(got, b)
	}
	for i, n := range sizes {
		if !bytes.Equal(got[i], msg(n)) {
			t.Errorf("message of %d bytes came back as %d different bytes", n, len(got[i]))
		}
	}
	if _, err := c.ReadMessage(ctx); CodeOf(err) != CodeProtocol {
		t.Errorf("message of MaxFrameSize+1 bytes: %v, want a protocol error", err)
	}
}

// TestReadMessageAllocatesItsSize: reading a 1 MiB message allocates about
// 1 MiB (its copy), not the 4-5 MiB of a buffer grown from 512 bytes.
func TestReadMessageAllocatesItsSize(t *testing.T) {
	const n, count = 1 << 20, 16
	payload := bytes.Repeat([]byte{7}, n)
	ready := make(chan struct{})
	c := wsPair(t, func(ctx context.Context, ws *websocket.Conn) {
		<-ready
		for range count {
			if ws.Write(ctx, websocket.MessageBinary, payload) != nil {
				return
			}
		}
	})
	ctx := testutil.Context(t, 10*time.Second)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	close(ready)
	for range count {
		b, err := c.ReadMessage(ctx)
		if err != nil || len(b) != n {
			t.Fatalf("read %d bytes: %v", len(b), err)
		}
	}
	runtime.ReadMemStats(&after)
	// Both ends are in this process: the writer's allocations count too.
	per := float64(after.TotalAlloc-before.TotalAlloc) / count / n
	t.Logf("%.2f MiB allocated per 1 MiB message", per)
	if per > 1.6 {
		t.Errorf("reading a 1 MiB message allocated %.2f MiB", per)
	}
}

// BenchmarkReadMessage: 1 MiB messages over a loopback WebSocket.
func BenchmarkReadMessage(b *testing.B) {
	const n = 1 << 20
	payload := bytes.Repeat([]byte{7}, n)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for ws.Write(r.Context(), websocket.MessageBinary, payload) == nil {
		}
	}))
	defer hs.Close()
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	c := WebSocket(ws)
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		if m, err := c.ReadMessage(ctx); err != nil || len(m) != n {
			b.Fatal(len(m), err)
		}
	}
}
