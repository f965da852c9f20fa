package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/workspace/client"
)

// The crash matrix: for each seed, a workload built on the sending side,
// one daemon SIGKILLed at a named crash point (internal/crashpoint) of a
// push, a pull, a snapshot install or a GC, the daemon restarted on the
// same on-disk state, the sync run to completion, and both trees compared
// with a model of what the user was told was written.
//
// WSYNC_CRASH_SEED=n replays one seed (a-b a range of them); WSYNC_LONG=1
// runs ten per scenario.

// crashScenario is one cell of the matrix.
type crashScenario struct {
	op     string // push, pull, install or gc
	daemon string // computerd or server: the one killed
	point  string // the crash point's name
	maxHit int    // the seed picks the hit in 1..maxHit
	// perBatch: the point is hit once per 256-entry batch, so the second
	// phase must carry at least hit batches for the kill to happen.
	perBatch bool
}

var crashScenarios = []crashScenario{
	{"push", "computerd", "syncwire.push.applied", 3, true},      // the batch committed, its reply not sent
	{"push", "server", "syncwire.push.acked", 3, true},           // the reply received, the push cursor not saved
	{"push", "server", "syncwire.entries.sent", 3, true},         // the batch's chunks sent, its entries not
	{"pull", "server", "syncwire.pull.applied", 2, true},         // a pulled batch committed with its cursor
	{"pull", "computerd", "syncwire.entries.sent", 1, false},     // the feed read, nothing sent
	{"pull", "computerd", "syncwire.objects.sent", 4, false},     // a pulled batch's chunks in flight
	{"install", "computerd", "converge.install.batch", 2, false}, // part of a snapshot installed
	{"install", "server", "converge.snapshot.paged", 1, false},   // the snapshot staged, not committed
	{"gc", "computerd", "vfs.gc.committed", 1, false},            // GC's rows gone, its files not yet
	{"gc", "server", "vfs.gc.committed", 1, false},
}

// crashFigure is what one seed measured, for docs/PERFORMANCE.md.
type crashFigure struct {
	seed      uint64
	sc        crashScenario
	hit       int
	entries   int           // entries of the workload's second phase
	refetched int           // entries the resumed sync found already applied
	applied   int           // entries the resumed sync applied
	bounced   int           // entries the sync back the other way found already applied
	recover   time.Duration // restart to both trees verified equal
}

func TestCrashMatrix(t *testing.T) {
	var seeds []uint64
	switch {
	case os.Getenv("WSYNC_CRASH_SEED") != "":
		// One seed, or a range "a-b".
		v := os.Getenv("WSYNC_CRASH_SEED")
		from, to, isRange := strings.Cut(v, "-")
		if !isRange {
			to = from
		}
		a, err1 := strconv.ParseUint(from, 10, 64)
		b, err2 := strconv.ParseUint(to, 10, 64)
		if err1 != nil || err2 != nil || a == 0 || b < a {
			t.Fatalf("WSYNC_CRASH_SEED=%q: want a seed n >= 1 or a range a-b", v)
		}
		for s := a; s <= b; s++ {
			seeds = append(seeds, s)
		}
	case os.Getenv("WSYNC_LONG") != "":
		for s := range uint64(10 * len(crashScenarios)) {
			seeds = append(seeds, s+1)
		}
	default:
		// Every scenario once, the batch points twice.
		for s := range uint64(len(crashScenarios) + 3) {
			seeds = append(seeds, s+1)
		}
	}
	var mu sync.Mutex
	var figs []crashFigure
	runCrashSeeds(t, seeds, func(t *testing.T, seed uint64, f crashFigure, p *pair) {
		mu.Lock()
		figs = append(figs, f)
		mu.Unlock()
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-10s %-24s %5s %4s %8s %9s %8s %8s %9s\n", "op", "killed", "point", "seed", "hit", "entries", "refetched", "applied", "bounced", "recover")
	for _, f := range figs {
		fmt.Fprintf(&b, "%-8s %-10s %-24s %5d %4d %8d %9d %8d %8d %9s\n", f.sc.op, f.sc.daemon, f.sc.point, f.seed, f.hit, f.entries, f.refetched, f.applied, f.bounced, f.recover.Round(time.Millisecond))
	}
	t.Logf("crash matrix figures:\n%s", b.String())
}

// runCrashSeeds runs each seed in a subtest of its own and hands check
// what it left; a failed seed logs how to replay it.
func runCrashSeeds(t *testing.T, seeds []uint64, check func(t *testing.T, seed uint64, f crashFigure, p *pair)) {
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("replay with WSYNC_CRASH_SEED=%d", seed)
				}
			}()
			f, p := runCrashSeed(t, seed)
			check(t, seed, f, p)
		})
	}
}

func runCrashSeed(t *testing.T, seed uint64) (crashFigure, *pair) {
	sc := crashScenarios[(seed-1)%uint64(len(crashScenarios))]
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	hit := 1 + rng.IntN(sc.maxHit)
	t.Logf("seed %d: %s, kill %s at %s:%d", seed, sc.op, sc.daemon, sc.point, hit)
	p := newPair(t, pairOpts{separate: "disk"})
	c := p.client()
	m := treeModel{}
	var sender fsSide = apiSide{t: t, c: c}
	verb, back := "push", "pull"
	if sc.op == "pull" {
		sender, verb, back = mountSide{t: t, root: p.mount}, "pull", "push"
	}
	tStart := time.Now()
	genPhase(rng, m, sender, 1, 0)
	p.sync(verb)
	tBase := time.Now()
	base := maps.Clone(m)
	// A batch point's hit needs that many batches: new files enough for
	// hit-1 full batches and half of one more, whatever the phase's
	// overwrites, renames and deletes coalesce away.
	minNew := 0
	if sc.perBatch {
		minNew = 256*(hit-1) + 128
	}
	entries, seen := genPhase(rng, m, sender, 2, minNew)
	// Paths that lived only between the two syncs reach the receiver as
	// tombstones of paths it never had, skipped by a sync with or without
	// a crash (unless the crashed sync already carried them).
	ghosts := 0
	for p := range seen {
		_, now := m[p]
		_, before := base[p]
		if !now && !before {
			ghosts++
		}
	}
	if sc.op == "gc" {
		// The second phase's deletes and overwrites leave chunks that
		// only the next GC (at the daemon's start) collects.
		p.sync(verb)
		p.sync(back)
	}
	tWork := time.Now()
	env := crashpoint.Env + "=" + sc.point + ":" + strconv.Itoa(hit)
	victim := p.restartArmed(sc.daemon, sc.op, env)
	if sc.op != "gc" {
		r := p.cli("", verb)
		t.Logf("%s during the crash: exit %d %s", verb, r.code, strings.TrimSpace(r.stderr))
	}
	select {
	case <-victim.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("seed %d: %s never reached %s:%d", seed, sc.daemon, sc.point, hit)
	}
	if want := "crashpoint: " + sc.point + " hit"; !strings.Contains(victim.output(), want) {
		t.Fatalf("seed %d: %s died (%v) but not at its crash point %q:\n%s", seed, sc.daemon, victim.err, want, victim.output())
	}

	t0 := time.Now()
	t.Logf("seed %d: baseline %v, workload %v, crash %v", seed, tBase.Sub(tStart).Round(time.Millisecond), tWork.Sub(tBase).Round(time.Millisecond), t0.Sub(tWork).Round(time.Millisecond))
	if sc.daemon == "computerd" {
		syscallUnmount(p.mount)
		p.startComputerd()
	} else {
		p.startServer()
	}
	f := crashFigure{seed: seed, sc: sc, hit: hit, entries: entries}
	r := p.sync(verb)
	// What the resumed sync skipped beyond those is what the crash made it
	// send again (an upper bound: a tombstone under a deleted directory
	// is skipped too).
	f.refetched, f.applied = max(0, r.Skipped-ghosts), r.Entries
	// The other direction: what comes back is the resumed sync's own
	// entries when the crash cost the bounce suppression.
	f.bounced = p.sync(back).Skipped
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("seed %d: verify after recovery: exit %d\n%s%s", seed, r.code, r.stdout, r.stderr)
	}
	f.recover = time.Since(t0)
	m.check(t, "server", serverTree(t, c))
	m.check(t, "container", mountTree(t, p.mount))
	// A crash costs at most the batch in flight (and the one a pipelined
	// pull fetched ahead), except a cut-short install, which may re-send
	// the whole snapshot.
	bound := 2 * 256
	if sc.op == "install" {
		bound = len(m)
	}
	if f.refetched > bound {
		t.Errorf("seed %d: recovery re-fetched %d entries, want at most %d", seed, f.refetched, bound)
	}
	t.Logf("seed %d: recovered in %v; %d entries re-fetched, %d applied, %d bounced back", seed, f.recover.Round(time.Millisecond), f.refetched, f.applied, f.bounced)
	return f, p
}

// restartArmed restarts the victim with the crash point armed and returns
// it. For an install the container's state is removed first (a fresh
// container); for GC the victim dies while opening its store (computerd at
// its start, the server at the workspace's first use).
func (p *pair) restartArmed(daemon, op, env string) *proc {
	p.t.Helper()
	if op == "install" {
		p.dropContainer()
		if daemon == "computerd" {
			p.launchComputerd(env)
		} else {
			p.startComputerd()
		}
	}
	switch daemon {
	case "computerd":
		if op != "install" {
			p.cd.stop(15)
			syscallUnmount(p.mount)
			p.launchComputerd(env)
		}
		if op != "gc" {
			waitHealthy(p.t, "http://"+p.cdAddr, p.cd)
		}
		return p.cd
	default:
		p.server.stop(15)
		p.launchServer(env)
		waitHealthy(p.t, p.url, p.server)
		if op == "gc" {
			// The server opens a workspace's store, and collects, on
			// its first use.
			p.cli("", "ls", "/")
		}
		return p.server
	}
}

// fsSide is the side a workload is written on: the server's files API or
// the container's mount.
type fsSide interface {
	mkdir(p string)
	write(p string, data []byte)
	rename(from, to string)
	remove(p string)
	symlink(target, p string)
}

type apiSide struct {
	t *testing.T
	c *client.Workspace
}

func (s apiSide) do(what string, err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func (s apiSide) mkdir(p string) {
	_, err := s.c.Mkdir(context.Background(), p, 0o755, false)
	s.do("mkdir "+p, err)
}

func (s apiSide) write(p string, data []byte) {
	_, err := s.c.WriteFile(context.Background(), p, bytes.NewReader(data), nil)
	s.do("write "+p, err)
}

func (s apiSide) rename(from, to string) {
	_, err := s.c.Rename(context.Background(), from, to)
	s.do("rename "+from, err)
}

func (s apiSide) remove(p string) { s.do("remove "+p, s.c.Remove(context.Background(), p, true)) }

func (s apiSide) symlink(target, p string) {
	_, err := s.c.Symlink(context.Background(), target, p)
	s.do("symlink "+p, err)
}

type mountSide struct {
	t    *testing.T
	root string
}

func (s mountSide) do(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

func (s mountSide) at(p string) string          { return filepath.Join(s.root, p) }
func (s mountSide) mkdir(p string)              { s.do(os.Mkdir(s.at(p), 0o755)) }
func (s mountSide) write(p string, data []byte) { s.do(os.WriteFile(s.at(p), data, 0o644)) }
func (s mountSide) rename(from, to string)      { s.do(os.Rename(s.at(from), s.at(to))) }
func (s mountSide) remove(p string)             { s.do(os.RemoveAll(s.at(p))) }
func (s mountSide) symlink(target, p string)    { s.do(os.Symlink(target, s.at(p))) }

// treeModel is the tree the user was told was written: path (with a
// leading slash) to "dir", "file:SHA256" or "symlink:TARGET".
type treeModel map[string]string

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// genPhase writes one phase of a seed's workload on side s and records it
// in m, returning how many operations it made. Phase 1 builds a tree;
// phase 2 adds to it (at least minNew new files), overwrites, renames
// (files and a directory) and deletes (files and a directory).
func genPhase(rng *rand.Rand, m treeModel, s fsSide, phase, minNew int) (ops int, seen map[string]bool) {
	seen = map[string]bool{}
	put := func(p, v string) { m[p] = v; seen[p] = true }
	var dirs []string
	for p, v := range m {
		if v == "dir" {
			dirs = append(dirs, p)
		}
	}
	sort.Strings(dirs)
	newDir := func() string {
		parent := "/"
		if len(dirs) > 0 && rng.IntN(3) > 0 {
			parent = dirs[rng.IntN(len(dirs))]
		}
		p := path.Join(parent, fmt.Sprintf("d%d-%d", phase, rng.IntN(1<<30)))
		s.mkdir(p)
		put(p, "dir")
		dirs = append(dirs, p)
		ops++
		return p
	}
	data := func() []byte {
		var n int
		switch r := rng.IntN(100); {
		case r < 3: // several chunks, the last one partial
			n = 512<<10 + rng.IntN(2<<20)
		case r < 6:
			n = 64<<10 + rng.IntN(400<<10)
		case r < 8:
			n = 0
		default:
			n = 1 + rng.IntN(3000)
		}
		b := make([]byte, n)
		for i := 0; i < n; i += 8 {
			v := rng.Uint64()
			for j := 0; j < 8 && i+j < n; j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return b
	}
	writeNew := func() {
		p := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("f%d-%d", phase, rng.IntN(1<<30)))
		b := data()
		s.write(p, b)
		put(p, "file:"+sum(b))
		ops++
	}
	if phase == 1 {
		for range 12 + rng.IntN(8) {
			newDir()
		}
		for range 100 + rng.IntN(60) {
			writeNew()
		}
		// At least two multi-chunk files in every workload.
		for range 2 {
			p := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("big%d", rng.IntN(1<<30)))
			b := make([]byte, 600<<10+rng.IntN(1<<20))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			s.write(p, b)
			put(p, "file:"+sum(b))
			ops++
		}
		return ops, seen
	}
	for range 3 + rng.IntN(4) {
		newDir()
	}
	for range max(250+rng.IntN(150), minNew) {
		writeNew()
	}
	files := m.paths("file:")
	for _, p := range pick(rng, files, 30) { // overwrite
		b := data()
		s.write(p, b)
		put(p, "file:"+sum(b))
		ops++
	}
	files = m.paths("file:")
	for _, p := range pick(rng, files, 20) { // rename a file within the tree
		to := path.Join(dirs[rng.IntN(len(dirs))], "mv-"+path.Base(p))
		if _, taken := m[to]; taken || m[p] == "" {
			continue
		}
		s.rename(p, to)
		put(to, m[p])
		delete(m, p)
		ops++
	}
	for range 5 {
		t := fmt.Sprintf("target-%d", rng.IntN(100))
		p := path.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("ln%d-%d", phase, rng.IntN(1<<30)))
		s.symlink(t, p)
		put(p, "symlink:"+t)
		ops++
	}
	for _, p := range pick(rng, m.paths("file:"), 25) { // delete files
		s.remove(p)
		delete(m, p)
		ops++
	}
	// Rename one directory and delete another, with their subtrees.
	top := m.paths("dir")
	if len(top) >= 2 {
		pp := pick(rng, top, 2)
		from, gone := pp[0], pp[1]
		if !strings.HasPrefix(gone+"/", from+"/") && !strings.HasPrefix(from+"/", gone+"/") {
			to := "/moved-" + path.Base(from)
			s.rename(from, to)
			for _, q := range m.move(from, to) {
				seen[q] = true
			}
			s.remove(gone)
			m.drop(gone)
			ops += 2
		}
	}
	return ops, seen
}

// pick returns up to n distinct elements of xs in a seed-determined order.
func pick(rng *rand.Rand, xs []string, n int) []string {
	xs = slices.Clone(xs)
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs[:min(n, len(xs))]
}

// paths returns the sorted paths whose value starts with prefix.
func (m treeModel) paths(prefix string) []string {
	var out []string
	for p, v := range m {
		if strings.HasPrefix(v, prefix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// move renames a directory and returns its subtree's new paths.
func (m treeModel) move(from, to string) []string {
	var moved []string
	for p, v := range maps.Clone(m) {
		if p == from || strings.HasPrefix(p, from+"/") {
			delete(m, p)
			m[to+strings.TrimPrefix(p, from)] = v
			moved = append(moved, to+strings.TrimPrefix(p, from))
		}
	}
	return moved
}

func (m treeModel) drop(dir string) {
	for p := range maps.Clone(m) {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			delete(m, p)
		}
	}
}

// check compares a side's tree with the model, naming the first
// differences.
func (m treeModel) check(t *testing.T, side string, got treeModel) {
	t.Helper()
	var diffs []string
	for p, v := range m {
		if got[p] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %.80s, want %.80s", p, got[p], v))
		}
	}
	for p, v := range got {
		if _, ok := m[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %.80s, want nothing", p, v))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Errorf("%s tree differs from the model in %d paths (of %d):\n%s", side, len(diffs), len(m), strings.Join(diffs[:min(10, len(diffs))], "\n"))
	}
}

// serverTree reads the server's tree through ls -R with hashes.
func serverTree(t *testing.T, c *client.Workspace) treeModel {
	t.Helper()
	es, err := c.List(context.Background(), "/", true, true)
	if err != nil {
		t.Fatalf("list the server's tree: %v", err)
	}
	got := treeModel{}
	for _, e := range es {
		switch e.Type {
		case "file":
			// The bytes, not only the manifest's claim: a chunk a crashed
			// GC removed while still referenced must show.
			b, err := c.ReadFile(context.Background(), e.Path)
			if err != nil {
				t.Errorf("read %s from the server: %v", e.Path, err)
			}
			if h := sum(b); h != e.SHA256 {
				t.Errorf("server's %s reads as %s, its listing says %s", e.Path, h, e.SHA256)
			}
			got[e.Path] = "file:" + e.SHA256
		case "symlink":
			got[e.Path] = "symlink:" + e.Target
		default:
			got[e.Path] = e.Type
		}
	}
	return got
}

// mountTree reads the container's tree through its mount.
func mountTree(t *testing.T, root string) treeModel {
	t.Helper()
	got := treeModel{}
	err := filepath.WalkDir(root, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fp == root {
			return nil
		}
		p := "/" + filepath.ToSlash(strings.TrimPrefix(fp, root+"/"))
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(fp)
			if err != nil {
				return err
			}
			got[p] = "symlink:" + target
		case d.IsDir():
			got[p] = "dir"
		default:
			b, err := os.ReadFile(fp)
			if err != nil {
				return err
			}
			got[p] = "file:" + sum(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the mount: %v", err)
	}
	return got
}
