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
	consumed map[string]bool   // tokens a writer read and then deleted
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

	// Every token survives at its path or in a recorded copy of it.
	records, err := server.store.Conflicts(ctx, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	where := map[string][]string{}
	for _, c := range records {
		if c.Copy != "" {
			where[c.Path] = append(where[c.Path], c.Copy)
		}
	}
	lost := 0
	for tok, p := range l.written {
		if l.consumed[tok] {
			continue
		}
		found := false
		for _, q := range append([]string{p}, where[p]...) {
			if strings.Contains(want[q], tok+"\n") {
				found = true
				break
			}
		}
		if !found {
			lost++
			t.Errorf("token %s written to %s is gone (conflicts: %d)", tok, p, len(records))
		}
	}
	t.Logf("seed %d: %d tokens, %d consumed by deletes, %d conflicts, %d lost", seed, len(l.written), len(l.consumed), len(records), lost)
}

// writeOnce is one writer's step: mostly an append of token to a shared
// file (read, then write what was read plus the token), sometimes a
// private file, sometimes a delete of a shared file it has read.
func writeOnce(ctx context.Context, s *side, rng *rand.Rand, token string, l *ledger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := sharedPaths[rng.IntN(len(sharedPaths))]
	cur, err := s.store.ReadFile(ctx, p)
	if err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	switch r := rng.IntN(10); {
	case r == 0 && err == nil:
		l.consume(string(cur))
		return s.store.RemovePath(ctx, p, false)
	case r == 1:
		p = "own/" + s.name
		if cur, err = s.store.ReadFile(ctx, p); err != nil && !errors.Is(err, vfs.ErrNotExist) {
			return err
		}
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
