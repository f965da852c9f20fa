package converge

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
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
func floodNode(p *heapProbe, pages int) rpc.Handler {
	var mu sync.Mutex
	served := map[string]int{}
	return func(ctx context.Context, c *rpc.Incoming) error {
		d := rpc.NewDecoder(c.Body)
		q := nodeRequest{Path: d.String("path", 1<<20)}
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
	srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
	srv.Handle(MethodRoot, func(ctx context.Context, c *rpc.Incoming) error {
		return c.Reply(appendRootInfo(nil, rootInfo{Root: Hash{1}, Rev: 1, Names: 1}))
	})
	srv.Handle(MethodNode, func(ctx context.Context, c *rpc.Incoming) error {
		// A hostile peer answers any path, however long.
		d := rpc.NewDecoder(c.Body)
		q := nodeRequest{Path: d.String("path", 1<<20)}
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
	srv.Handle(MethodRevs, func(ctx context.Context, c *rpc.Incoming) error {
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
	_, err := r.repair(ctx, t, local, RepairOptions{})
	p.measure()
	p.check(t)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
}

// uv is a uvarint.
func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// zeroBomb is a zstd frame of n zero bytes: a few hundred bytes on the
// wire that decompress to n.
func zeroBomb(n int) []byte { return zenc().EncodeAll(make([]byte, n), nil) }

// TestHostileCallsBounded: every call the responder serves, given crafted
// bodies over a real session (counts claiming more than the body holds,
// lengths past the bounds, decompression bombs, garbage), answers with a
// typed error, and what the process holds afterwards stays within a
// fixed multiple of the bytes sent plus a constant however often the peer
// repeats it: no claim drives an allocation past the documented bounds,
// and nothing accumulates.
func TestHostileCallsBounded(t *testing.T) {
	ctx := context.Background()
	cont := newStore(t, "container") // empty, so a snapshot can begin
	r := newRig(t, nil, cont)
	sess := r.session(t)
	var st callStats
	page := func(first, n, raw uint64, z []byte) []byte { return cat(uv(first), uv(n), uv(raw), z) }
	tests := []struct {
		name   string
		method rpc.Method
		body   []byte
		stream [][]byte // MethodSnapObjects messages
		want   error
	}{
		{"root: bad ignore flag", MethodRoot, []byte{7}, nil, rpc.ErrProtocol},
		{"root: ignore count past the body", MethodRoot, cat([]byte{1}, uv(vfs.MaxIgnore)), nil, rpc.ErrProtocol},
		{"node: garbage", MethodNode, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, nil, rpc.ErrProtocol},
		{"node: path length past the body", MethodNode, uv(vfs.MaxPathLen), nil, rpc.ErrProtocol},
		{"revs: path count past the body", MethodRevs, uv(MaxPaths), nil, rpc.ErrProtocol},
		{"revs: path count past the bound", MethodRevs, uv(MaxPaths + 1), nil, rpc.ErrProtocol},
		{"entries: path count past the body", MethodEntries, cat(uv(MaxPaths), []byte{1, 'a'}), nil, rpc.ErrProtocol},
		{"snapshot begin: total past the bound", MethodSnapBegin, cat(make([]byte, 32), uv(1), uv(MaxSnapshotRecords+1)), nil, rpc.ErrProtocol},
		{"snapshot have: hash count past the body", MethodSnapHave, uv(syncwire.MaxHashes), nil, rpc.ErrProtocol},
		{"snapshot page: raw length past the bound", MethodSnapPage, page(0, 1, MaxPageRaw+1, zeroBomb(16)), nil, rpc.ErrProtocol},
		{"snapshot page: record count past the bound", MethodSnapPage, page(0, MaxPageRecords+1, 16, zeroBomb(16)), nil, rpc.ErrProtocol},
		{"snapshot page: decompression bomb", MethodSnapPage, page(0, MaxPageRecords, MaxPageRaw, zeroBomb(MaxPageRaw)), nil, rpc.ErrProtocol},
		{"snapshot page: bomb past its declared length", MethodSnapPage, page(0, 1, 64, zeroBomb(MaxPageRaw)), nil, rpc.ErrProtocol},
		{"snapshot page: record longer than the bound", MethodSnapPage, func() []byte {
			raw := cat(uv(maxRecordLen+1), make([]byte, 64))
			return page(0, 1, uint64(len(raw)), zenc().EncodeAll(raw, nil))
		}(), nil, rpc.ErrProtocol},
		{"snapshot page: continuation claiming more refs than it holds", MethodSnapPage, func() []byte {
			raw := cat(uv(4), []byte{recRefs}, uv(maxPartRefs), []byte{0})
			return page(0, 1, uint64(len(raw)), zenc().EncodeAll(raw, nil))
		}(), nil, rpc.ErrProtocol},
		{"snapshot page: head claiming a file past the bound", MethodSnapPage, func() []byte {
			raw := cat(uv(12), []byte{recHead}, uv(chunkstore.MaxManifestChunks+1))
			raw = append(raw, make([]byte, 12-len(raw)+len(uv(12)))...)
			return page(0, 1, uint64(len(raw)), zenc().EncodeAll(raw, nil))
		}(), nil, rpc.ErrProtocol},
		{"snapshot objects: decompression bombs", MethodSnapObjects, nil, func() [][]byte {
			// One object each, declared a chunk long, whose frame yields
			// four: zstd is told the declared size and stops there.
			z := zeroBomb(4 * chunkstore.ChunkSize)
			var ms [][]byte
			for i := range 8 {
				h := chunkstore.Hash{byte(i + 1)}
				ms = append(ms, cat(uv(1), h[:], []byte{1}, uv(chunkstore.ChunkSize), uv(uint64(len(z))), z))
			}
			return ms
		}(), rpc.ErrProtocol},
		{"snapshot objects: a chunk twice", MethodSnapObjects, nil, func() [][]byte {
			c := []byte("a chunk sent twice in one call")
			o := syncwire.Object{Hash: chunkstore.Sum(c), Data: c}
			return [][]byte{syncwire.AppendObjects(nil, []syncwire.Object{o}), syncwire.AppendObjects(nil, []syncwire.Object{o})}
		}(), rpc.ErrProtocol},
		{"snapshot objects: object count past the body", MethodSnapObjects, nil, [][]byte{uv(syncwire.MaxHashes)}, rpc.ErrProtocol},
		{"snapshot commit: garbage", MethodSnapCommit, []byte{1, 2, 3}, nil, rpc.ErrProtocol},
	}
	// Objects need a begun snapshot.
	_, err := snapBegin(ctx, sess, &st, Hash{5}, 1, 10)
	must(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newHeapProbe(2, 2<<20)
			for range 16 {
				var err error
				if tt.stream != nil {
					err = func() error {
						o, err := sess.Open(ctx, tt.method, nil, true)
						if err != nil {
							return err
						}
						defer o.Close()
						for _, m := range tt.stream {
							if o.Send(ctx, m) != nil {
								break
							}
							p.sentBytes(len(m))
						}
						o.CloseSend()
						_, err = o.Reply(ctx)
						return err
					}()
				} else {
					p.sentBytes(len(tt.body))
					_, err = call(ctx, sess, &st, tt.method, tt.body)
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				p.measure()
			}
			p.check(t)
		})
	}
}

// TestWalkBudgetKeepsWalkOrder: the directories of a level compared at
// once share the difference budget; whichever finishes first, the report
// is the first MaxDifferences differences in walk order (directories in
// order, names in order), Truncated.
func TestWalkBudgetKeepsWalkOrder(t *testing.T) {
	ctx := context.Background()
	var base, extra []vfs.ChangeEntry
	for d := range 20 {
		dir := fmt.Sprintf("d%02d", d)
		base = append(base, vfs.ChangeEntry{Kind: vfs.EntryDir, Path: dir, Mode: 0o755})
		for f := range 3 {
			c := contents[f%len(contents)]
			base = append(base, vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("%s/f%d", dir, f), Mode: 0o644, Size: int64(len(c)), Chunks: chunkstore.Manifest{ref(c)}})
		}
		for x := range 10 {
			extra = append(extra, vfs.ChangeEntry{Kind: vfs.EntryDir, Path: fmt.Sprintf("%s/x%d", dir, x), Mode: 0o755})
		}
	}
	server, cont := newStore(t, "server"), newStore(t, "container")
	applyAll(t, server, base)
	applyAll(t, cont, append(slices.Clone(base), extra...))
	var want []string
	for _, e := range extra[:MaxDifferences] {
		want = append(want, e.Path)
	}
	r := newRig(t, server, cont)
	sess := r.session(t)
	for range 5 {
		rep, err := Verify(ctx, server, sess, nil)
		must(t, err)
		if got := diffPaths(rep.Differences); !slices.Equal(got, want) || !rep.Truncated {
			t.Fatalf("differences (truncated %v):\n%q\nwant\n%q", rep.Truncated, got, want)
		}
	}
}

// TestHostileSnapshotReceiverRefused: the sender's decoders of the
// snapshot replies refuse a receiver's garbage with a typed error.
func TestHostileSnapshotReceiverRefused(t *testing.T) {
	ctx := context.Background()
	server := newStore(t, "server")
	applyAll(t, server, smallTree())
	reply := func(b []byte) rpc.Handler {
		return func(ctx context.Context, c *rpc.Incoming) error { return c.Reply(b) }
	}
	for _, tt := range []struct {
		name   string
		method rpc.Method
		h      rpc.Handler
	}{
		{"begin: staged past the total", MethodSnapBegin, reply(uv(1 << 40))},
		{"begin: trailing bytes", MethodSnapBegin, reply([]byte{0, 0})},
		{"have: bitmap of the wrong length", MethodSnapHave, reply(make([]byte, 4096))},
		{"page: staged count not the pages", MethodSnapPage, reply(cat(uv(7), uv(7)))},
		{"page: garbage", MethodSnapPage, reply([]byte{0xff})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cont := newStore(t, "container")
			srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
			resp := &Responder{store: cont, log: slog.New(slog.DiscardHandler)}
			resp.snap.r = resp
			t.Cleanup(func() { resp.Close() })
			for m, h := range map[rpc.Method]rpc.Handler{
				MethodSnapBegin: resp.snap.begin, MethodSnapHave: resp.snap.have, MethodSnapObjects: resp.snap.objects,
				MethodSnapPage: resp.snap.page, MethodSnapCommit: resp.snap.commit,
			} {
				if m == tt.method {
					h = tt.h
				}
				srv.Handle(m, h)
			}
			r := serveRig(t, server, cont, srv, resp)
			_, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName})
			if !errors.Is(err, rpc.ErrProtocol) {
				t.Fatalf("err = %v, want EPROTOCOL", err)
			}
		})
	}
}
