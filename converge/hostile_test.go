package converge

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/vfs"
)

// heapInUse is the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// heapProbe records, at points a hostile peer chooses (while the victim
// waits on it), how much more heap the process holds than at the start,
// against how many bytes the peer has sent so far.
type heapProbe struct {
	mu    sync.Mutex
	base  int64
	sent  int64
	worst struct{ held, sent int64 }
	k     int64 // allowed held bytes per byte sent
	c     int64 // allowed constant
	fail  string
}

func newHeapProbe(k, c int64) *heapProbe {
	return &heapProbe{base: heapInUse(), k: k, c: c}
}

// sentBytes adds n bytes the peer sent.
func (p *heapProbe) sentBytes(n int) {
	p.mu.Lock()
	p.sent += int64(n)
	p.mu.Unlock()
}

// measure checks the bound now.
func (p *heapProbe) measure() {
	held := heapInUse() - p.base
	p.mu.Lock()
	defer p.mu.Unlock()
	if held-p.k*p.sent > p.worst.held-p.k*p.worst.sent {
		p.worst.held, p.worst.sent = held, p.sent
	}
	if held > p.k*p.sent+p.c && p.fail == "" {
		p.fail = fmt.Sprintf("held %d bytes after the peer sent %d (bound %d*sent+%d)", held, p.sent, p.k, p.c)
	}
}

func (p *heapProbe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("peer sent %d bytes; worst point: held %d bytes after %d sent", p.sent, p.worst.held, p.worst.sent)
	if p.fail != "" {
		t.Fatal(p.fail)
	}
}

// floodNode answers every Node request with full pages of new file names
// (pages pages of MaxChildren, then the end) and measures the heap each
// time the walker asks for the next page.
func floodNode(p *heapProbe, pages int) syncwire.Handler {
	var mu sync.Mutex
	served := map[string]int{}
	return func(ctx context.Context, c *syncwire.Incoming) error {
		rd := reader{b: c.Body}
		q := nodeRequest{Path: rd.str("path", 1<<20)}
		p.measure()
		mu.Lock()
		n := served[q.Path]
		served[q.Path]++
		mu.Unlock()
		kids := make([]Child, 0, MaxChildren)
		for i := range MaxChildren {
			kids = append(kids, Child{Name: fmt.Sprintf("f%07d", n*MaxChildren+i), Kind: vfs.KindFile, Mode: 0o644, Hash: Hash{byte(i), 1}})
		}
		b := appendNodePage(nil, nodePage{Children: kids, More: n+1 < pages})
		p.sentBytes(len(b))
		return c.Reply(b)
	}
}

// TestHostileWalkHeldBytesBounded: issue 9, item 9. A peer that answers
// the walk with page after page of names we lack made Verify keep every
// difference of the level (about 4x the bytes sent) before it applied the
// report's bound. The walk now charges differences as it finds them and
// stops at the bound.
func TestHostileWalkHeldBytesBounded(t *testing.T) {
	ctx := context.Background()
	local := newStore(t, "server")
	applyAll(t, local, smallTree())
	pages := 192
	p := newHeapProbe(1, 4<<20)
	r := hostileRig(t, floodNode(p, pages))
	sess := r.session(t)
	rep, err := Verify(ctx, local, sess, nil)
	must(t, err)
	p.measure()
	p.check(t)
	if len(rep.Differences) != MaxDifferences || !rep.Truncated {
		t.Errorf("differences = %d, truncated = %v, want %d and truncated", len(rep.Differences), rep.Truncated, MaxDifferences)
	}
	runtime.KeepAlive(rep)
}

// TestHostileRepairPathsBounded: a peer that wins a directory we lack and
// nests it ever deeper with long names, then floods the bottom, made
// Repair keep a path of the whole depth per name it sent (thousands of
// bytes per 44 sent). Paths are now validated and charged as they are
// taken: the nesting past vfs.MaxPathLen is malformed.
func TestHostileRepairPathsBounded(t *testing.T) {
	ctx := context.Background()
	local := newStore(t, "server")
	applyAll(t, local, smallTree())
	p := newHeapProbe(2, 4<<20)
	long := strings.Repeat("a", 200)
	flood := floodNode(p, 64)
	cont := newStore(t, "container")
	srv := syncwire.NewServer(cont, syncwire.ServerOptions{Config: testConfig()})
	srv.Handle(MethodRoot, func(ctx context.Context, c *syncwire.Incoming) error {
		return c.Reply(appendRootInfo(nil, rootInfo{Root: Hash{1}, Rev: 1, Names: 1}))
	})
	srv.Handle(MethodNode, func(ctx context.Context, c *syncwire.Incoming) error {
		// A hostile peer answers any path, however long.
		rd := reader{b: c.Body}
		q := nodeRequest{Path: rd.str("path", 1<<20)}
		switch {
		case q.Path == "":
			return c.Reply(appendNodePage(nil, nodePage{Children: []Child{{Name: "p", Kind: vfs.KindDir, Mode: 0o755, Hash: Hash{2}}}}))
		case depth(q.Path) < 28:
			b := appendNodePage(nil, nodePage{Children: []Child{{Name: long, Kind: vfs.KindDir, Mode: 0o755, Hash: Hash{3}}}})
			p.sentBytes(len(b))
			return c.Reply(b)
		}
		return flood(ctx, c)
	})
	srv.Handle(MethodRevs, func(ctx context.Context, c *syncwire.Incoming) error {
		paths, err := decodePaths(c.Body)
		if err != nil {
			return err
		}
		revs := make([]int64, len(paths))
		for i := range revs {
			revs[i] = 1 << 40
		}
		return c.Reply(appendRevs(nil, revs))
	})
	r := serveRig(t, nil, cont, srv, nil)
	_, err := Repair(ctx, local, r.session(t), RepairOptions{Peer: peerName})
	p.measure()
	p.check(t)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
}
