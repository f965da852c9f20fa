package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/converge"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// TestConcurrentWritersLoseNothing is the randomized check of issue 11:
// the server and two containers write the same few files at once, each
// write a read-modify-write that appends a token to what its writer
// read, while the server syncs both containers (pull both, push both)
// over real loopback WebSockets with the real driver. Every token ever
// written must survive somewhere, under the path's name or in a recorded
// conflict copy of it, unless a writer deleted the file after reading it;
// and after the writers stop, the three trees converge (equal Merkle
// roots). Last-writer-wins fails it on most seeds.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	seeds := 12
	if os.Getenv("WSYNC_LONG") != "" {
		seeds = 200
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runWriters(t, uint64(seed)) })
	}
}

var sharedPaths = []string{"PLAN.md", "state.json", "counter", "d/log.txt", "d/e/notes"}

// side is one store with the lock its writer and the syncs that apply to
// it take: a read-modify-write must not straddle an apply (that would be
// a lost update inside one side, which no sync can see).
type side struct {
	name  string
	store *vfs.Store
	mu    sync.Mutex
}

type ledger struct {
	mu       sync.Mutex
	written  map[string]string // token -> path
	consumed map[string]bool   // tokens a writer read and then removed or overwrote
}

func (l *ledger) write(token, p string) {
	l.mu.Lock()
	l.written[token] = p
	l.mu.Unlock()
}

func (l *ledger) consume(content string) {
	l.mu.Lock()
	for tok := range strings.Lines(content) {
		l.consumed[strings.TrimSuffix(tok, "\n")] = true
	}
	l.mu.Unlock()
}

func runWriters(t *testing.T, seed uint64) {
	ctx := testutil.Context(t, 2*time.Minute)
	open := func(name string) *side {
		s, err := vfs.Open(ctx, t.TempDir()+"/"+name+".db", vfs.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return &side{name: name, store: s}
	}
	server := open("server")
	conts := []*side{open("container"), open("b")}
	type peer struct {
		c   *side
		drv *syncwire.Driver
	}
	var peers []peer
	for i, c := range conts {
		srv := syncwire.NewServer(c.store, rpc.ServerOptions{})
		url := testutil.WSServer(t, srv, "/sync")
		cl := rpc.NewClient(rpc.ClientOptions{Config: rpc.Config{ID: server.store.ID()}, URL: url})
		t.Cleanup(func() { cl.Close() })
		peerName, sideName := "computerd", vfs.SideContainer
		if i > 0 {
			peerName, sideName = "computerd@"+c.name, c.name
		}
		drv := syncwire.NewDriver(server.store, peerName, cl, syncwire.DriverOptions{Conflicts: &vfs.ConflictOptions{Side: sideName}})
		peers = append(peers, peer{c, drv})
	}
	// round is the workspace's tick over both runtimes: pull both, push
	// both. It reports whether anything moved.
	round := func() bool {
		moved := false
		step := func(s *side, op func(context.Context) (syncwire.Result, error)) {
			s.mu.Lock()
			defer s.mu.Unlock()
			res, err := op(ctx)
			if err != nil {
				t.Errorf("sync: %v", err)
			}
			moved = moved || res.Applied > 0 || res.Deferred > 0 || len(res.Conflicts) > 0
		}
		for _, p := range peers {
			step(server, p.drv.PullOnce)
		}
		for _, p := range peers {
			step(p.c, p.drv.PushOnce)
		}
		return moved
	}
	round()

	l := &ledger{written: map[string]string{}, consumed: map[string]bool{}}
	var wg sync.WaitGroup
	for i, s := range append([]*side{server}, conts...) {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			for n := range 30 {
				if err := writeOnce(ctx, s, rng, fmt.Sprintf("%s:%d", s.name, n), l); err != nil {
					t.Errorf("%s: %v", s.name, err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			round()
		}
	}
	settledRounds := 0
	for round() {
		if settledRounds++; settledRounds > 8 {
			t.Fatal("the three stores do not settle within 8 rounds after the writers stop")
		}
	}
	if t.Failed() {
		return
	}

	want := treeOf(t, server.store)
	for _, c := range conts {
		if got := treeOf(t, c.store); !mapsEqual(got, want) {
			t.Fatalf("%s's tree differs from the server's:\n%s", c.name, diffMaps(want, got))
		}
	}
	root := func(s *vfs.Store) converge.Hash {
		tr, err := converge.BuildTree(ctx, s, vfs.Ignore{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Root
	}
	for _, c := range conts {
		if root(c.store) != root(server.store) {
			t.Fatalf("%s's Merkle root differs from the server's", c.name)
		}
	}

	// Every token survives in some file of the converged tree: under the
	// name it was written to, the name a rename gave it, or a recorded
	// conflict copy.
	records, err := server.store.Conflicts(ctx, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, content := range want {
		all.WriteString(content)
	}
	everything := all.String()
	lost := 0
	for tok, p := range l.written {
		if !l.consumed[tok] && !strings.Contains(everything, tok+"\n") {
			lost++
			t.Errorf("token %s written to %s is gone (conflicts: %d)", tok, p, len(records))
		}
	}
	t.Logf("seed %d: %d tokens, %d consumed by deletes and overwrites, %d conflicts, %d lost", seed, len(l.written), len(l.consumed), len(records), lost)
}

// writeOnce is one writer's step. Mostly an append of token to a shared
// file (read, then write what was read plus the token: a path that is a
// directory here is removed first). Sometimes a private file; a delete of
// a shared file, an rm -r of the shared directory, a rename of one shared
// file over another, or the counter file turned into a directory. What a
// step removes or overwrites it has read: those tokens are consumed.
func writeOnce(ctx context.Context, s *side, rng *rand.Rand, token string, l *ledger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := sharedPaths[rng.IntN(len(sharedPaths))]
	switch r := rng.IntN(20); {
	case r < 2:
		if fi, err := s.store.Stat(ctx, p); err == nil && fi.Kind == vfs.KindFile {
			if err := consumeTree(ctx, s.store, p, l); err != nil {
				return err
			}
			return s.store.RemovePath(ctx, p, false)
		}
	case r == 2:
		if fi, err := s.store.Stat(ctx, "d"); err == nil && fi.Kind == vfs.KindDir {
			if err := consumeTree(ctx, s.store, "d", l); err != nil {
				return err
			}
			return s.store.RemovePath(ctx, "d", true)
		}
	case r == 3:
		q := sharedPaths[rng.IntN(len(sharedPaths))]
		src, err1 := s.store.Stat(ctx, p)
		dst, err2 := s.store.Stat(ctx, q)
		if p != q && err1 == nil && src.Kind == vfs.KindFile && (err2 != nil || dst.Kind == vfs.KindFile) {
			if err := consumeTree(ctx, s.store, q, l); err != nil {
				return err
			}
			if err := s.store.MkdirPath(ctx, path.Dir(q), 0o755, true); err != nil && path.Dir(q) != "." {
				return err
			}
			return s.store.RenamePath(ctx, p, q)
		}
	case r == 4:
		if fi, err := s.store.Stat(ctx, "counter"); err == nil && fi.Kind == vfs.KindFile {
			if err := consumeTree(ctx, s.store, "counter", l); err != nil {
				return err
			}
			if err := s.store.RemovePath(ctx, "counter", false); err != nil {
				return err
			}
		}
		p = "counter/x"
	case r < 7:
		p = "own/" + s.name
	}
	// A directory where the file goes (the counter turned into one) is
	// removed first, and a file where a directory goes (counter, on the
	// way to counter/x) too.
	for _, q := range []string{p, path.Dir(p)} {
		fi, err := s.store.Stat(ctx, q)
		if err != nil || q == "." || (q == p) == (fi.Kind != vfs.KindDir) {
			continue
		}
		if err := consumeTree(ctx, s.store, q, l); err != nil {
			return err
		}
		if err := s.store.RemovePath(ctx, q, true); err != nil {
			return err
		}
	}
	cur, err := s.store.ReadFile(ctx, p)
	if err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	if dir := path.Dir(p); dir != "." {
		if err := s.store.MkdirPath(ctx, dir, 0o755, true); err != nil {
			return err
		}
	}
	l.write(token, p)
	_, err = s.store.WriteFile(ctx, p, append(cur, token+"\n"...), 0o644)
	return err
}

// consumeTree marks every token in the files at or below p as consumed:
// the writer saw them and is about to remove or overwrite them.
func consumeTree(ctx context.Context, s *vfs.Store, p string, l *ledger) error {
	fi, err := s.Stat(ctx, p)
	switch {
	case errors.Is(err, vfs.ErrNotExist), errors.Is(err, vfs.ErrNotDir):
		return nil
	case err != nil:
		return err
	case fi.Kind == vfs.KindFile:
		b, err := s.ReadFile(ctx, p)
		if err != nil {
			return err
		}
		l.consume(string(b))
		return nil
	case fi.Kind != vfs.KindDir:
		return nil
	}
	es, err := s.List(ctx, p)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := consumeTree(ctx, s, path.Join(p, e.Name), l); err != nil {
			return err
		}
	}
	return nil
}

// treeOf is path -> content ("dir" for directories).
func treeOf(t *testing.T, s *vfs.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		es, err := s.List(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			p := path.Join(dir, e.Name)
			if e.Kind == vfs.KindDir {
				out[p] = "dir"
				walk(p)
				continue
			}
			b, err := s.ReadFile(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = string(b)
		}
	}
	walk("")
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffMaps(a, b map[string]string) string {
	var sb strings.Builder
	for k, v := range a {
		if b[k] != v {
			fmt.Fprintf(&sb, "%s: %q vs %q\n", k, v, b[k])
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			fmt.Fprintf(&sb, "%s: missing vs %q\n", k, v)
		}
	}
	return sb.String()
}
