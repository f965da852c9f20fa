package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
	"github.com/wsync/wsync/workspace"
)

// Full disks during sync: the receiving side's directory is a small tmpfs,
// filled (but for a few MiB) by a ballast file before a sync of more than
// fits, in three shapes (see fullLoads). The sync must fail with a clear error, keep everything committed
// before, leave the sending side's cursor at what was applied, and
// complete once the ballast is gone. (A full disk under a write through
// the mount is fusefs's test.)

// fullTmpfs is the size of the tmpfs under the receiving side.
const fullTmpfs = 64 << 20

// fullLoad is one shape of a workload larger than the free space: each
// fills another part of the store first (chunk files, pack files, or rows
// of the database itself, where SQLite reports the full disk).
type fullLoad struct {
	name  string
	files int
	size  int   // bytes per file
	spare int64 // left free by the ballast
}

var fullLoads = []fullLoad{
	{"chunk-files", 12, 5 << 19, 6 << 20}, // 30 MiB of 2.5 MiB files
	{"packs", 100, 120 << 10, 8 << 20},    // 12 MiB of partial chunks
	{"rows", 1000, 7 << 9, 2 << 20},       // 3.5 MiB of chunks inline in the database
}

// write writes the load's files under /big through s, recording them in m.
func (l fullLoad) write(rng *rand.Rand, m treeModel, s fsSide) {
	s.mkdir("/big")
	m["/big"] = "dir"
	for i := range l.files {
		b := randomBytes(rng, l.size)
		pth := fmt.Sprintf("/big/%04d", i)
		s.write(pth, b)
		m[pth] = "file:" + sum(b)
	}
}

// ballast fills dir's filesystem until spare bytes are left and returns
// the file to remove to free it.
func ballast(t *testing.T, dir string, spare int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free <= spare {
		t.Fatalf("%s has %d bytes free, want more than %d", dir, free, spare)
	}
	f := filepath.Join(dir, "ballast")
	if err := os.WriteFile(f, make([]byte, free-spare), 0o600); err != nil {
		t.Fatalf("ballast: %v", err)
	}
	return f
}

// randomBytes returns n bytes zstd cannot shrink.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// status is status --json's remote positions.
func (p *pair) remoteStatus() workspace.RemoteStatus {
	p.t.Helper()
	var st workspace.Status
	if err := json.Unmarshal([]byte(p.ok("status", "--json")), &st); err != nil {
		p.t.Fatal(err)
	}
	if st.Remote == nil {
		p.t.Fatalf("status has no remote: %s", st.RemoteError)
	}
	return *st.Remote
}

// checkPrefix asserts that got holds all of base and, of the rest of want,
// only whole, correct entries.
func checkPrefix(t *testing.T, side string, got, base, want treeModel) int {
	t.Helper()
	for p, v := range base {
		if got[p] != v {
			t.Errorf("%s lost %s after the full disk: %.80q, want %.80q", side, p, got[p], v)
		}
	}
	extra := 0
	for p, v := range got {
		if _, ok := base[p]; ok {
			continue
		}
		if want[p] != v {
			t.Errorf("%s holds %s as %.80q, want %.80q or nothing", side, p, v, want[p])
		}
		extra++
	}
	return extra
}

func TestFullContainerDiskDuringPush(t *testing.T) {
	for _, l := range fullLoads {
		t.Run(l.name, func(t *testing.T) { fullDiskSync(t, "push", l) })
	}
}

func TestFullServerDiskDuringPull(t *testing.T) {
	for _, l := range fullLoads {
		t.Run(l.name, func(t *testing.T) { fullDiskSync(t, "pull", l) })
	}
}

// fullDiskSync fills the receiving side's disk during a sync of more than
// fits: the container's state directory for a push, the server's data
// directory for a pull.
func fullDiskSync(t *testing.T, verb string, l fullLoad) {
	opts := pairOpts{separate: "disk", stateTmpfs: fullTmpfs}
	if verb == "pull" {
		opts = pairOpts{separate: "disk", dataTmpfs: fullTmpfs}
	}
	p := newPair(t, opts)
	c := p.client()
	rng := rand.New(rand.NewPCG(uint64(len(l.name)), 9))
	var sender fsSide = apiSide{t: t, c: c}
	receiver, full := "container", filepath.Dir(p.cdState)
	if verb == "pull" {
		sender, receiver, full = mountSide{t: t, root: p.mount}, "server", p.data
	}
	m := treeModel{}
	genPhase(rng, m, sender, 1, 0)
	p.sync(verb)
	base := maps.Clone(m)
	before := p.remoteStatus()
	bf := ballast(t, full, l.spare)

	l.write(rng, m, sender)
	r := p.cli("", verb)
	if r.code == 0 {
		t.Fatalf("a %s of %d MiB into %d MiB of free space succeeded", verb, l.files*l.size>>20, l.spare>>20)
	}
	if msg := r.stderr; !strings.Contains(msg, "no space left on device") && !strings.Contains(msg, "disk is full") {
		t.Errorf("%s into a full disk: exit %d, stderr %q, want it to say the disk is full", verb, r.code, msg)
	}
	t.Logf("%s into a full disk: %s", verb, strings.TrimSpace(r.stderr))

	// Everything committed before is there; of this sync, only whole
	// entries.
	got := serverTree(t, c)
	if verb == "push" {
		got = mountTree(t, p.mount)
	}
	applied := checkPrefix(t, receiver, got, base, m)
	// The sender's cursor stays at what the receiver applied: short of
	// the end, and for a push never past what the container echoes.
	st := p.remoteStatus()
	switch verb {
	case "push":
		if !st.Container.AppliedPush.Watermark().Covers(st.Server.Push.Watermark()) {
			t.Errorf("server's push cursor %+v is past what the container applied (%+v)", st.Server.Push, st.Container.AppliedPush)
		}
		if st.Server.Push.Watermark().Covers(watermark.At(st.Server.CurrentRev)) {
			t.Errorf("server's push cursor %+v reached its current rev %d though the push failed", st.Server.Push, st.Server.CurrentRev)
		}
	case "pull":
		if st.Server.Fetch.Watermark().Covers(watermark.At(st.Container.CurrentRev)) {
			t.Errorf("server's fetch cursor %+v reached the container's rev %d though the pull failed", st.Server.Fetch, st.Container.CurrentRev)
		}
		if !st.Server.Fetch.Watermark().Covers(before.Server.Fetch.Watermark()) {
			t.Errorf("fetch cursor went back: %+v -> %+v", before.Server.Fetch, st.Server.Fetch)
		}
	}

	// Free the space: the next sync completes, with nothing else done.
	if err := os.Remove(bf); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	rep := p.sync(verb)
	if rv := p.cli("", "verify"); rv.code != 0 {
		t.Errorf("verify after the space came back: exit %d\n%s%s", rv.code, rv.stdout, rv.stderr)
	}
	recover := time.Since(t0)
	m.check(t, "server", serverTree(t, c))
	m.check(t, "container", mountTree(t, p.mount))
	if rep.Skipped > 256 {
		t.Errorf("the %s after the full disk re-sent %d entries the %s had, want at most one batch", verb, rep.Skipped, receiver)
	}
	t.Logf("full %s disk (%s, %d x %.1f KiB into %d MiB free): %d entries applied before it filled; after freeing space the %s applied %d and re-sent %d already applied, verified equal in %v",
		receiver, l.name, l.files, float64(l.size)/1024, l.spare>>20, applied, verb, rep.Entries, rep.Skipped, recover.Round(time.Millisecond))
}

// TestFullContainerDiskDuringBootstrap fills the disk under an empty
// container's state while the server bootstraps it from a snapshot (the
// chunks it holds, the staged pages, or the install's rows, by shape).
// The push fails naming the full disk, computerd keeps running and shows
// no partial file, and once the space is back the next push completes the
// bootstrap: both sides equal, verify clean, no hold or staging left, and
// every chunk row counting exactly the manifests that name it.
func TestFullContainerDiskDuringBootstrap(t *testing.T) {
	for _, l := range bootLoads {
		t.Run(l.name, func(t *testing.T) { fullDiskBootstrap(t, l) })
	}
}

// bootLoads fill the disk in each phase of a bootstrap: the chunks' bytes
// (objects), their rows and holds, and the install's rows once part of
// the tree is in (the last measured to fail after 768 or 1,792 of its
// 5,000 files, and to succeed from 3.5 MiB free).
var bootLoads = []fullLoad{
	{"chunk-bytes", 100, 120 << 10, 8 << 20},
	{"held-rows", 1000, 7 << 9, 2 << 20},
	{"install-rows", 5000, 16, 5 << 19},
}

func fullDiskBootstrap(t *testing.T, l fullLoad) {
	p := newPair(t, pairOpts{separate: "disk", stateTmpfs: fullTmpfs})
	rng := rand.New(rand.NewPCG(uint64(len(l.name)), 0xb007))
	m := treeModel{}
	l.write(rng, m, apiSide{t: t, c: p.client()})

	// A container replaced by an empty one, on a disk with little room.
	p.replaceContainer()
	bf := ballast(t, filepath.Dir(p.cdState), l.spare)

	r := p.cli("", "push")
	if r.code == 0 {
		t.Fatalf("a bootstrap of %d MiB into %d MiB of free space succeeded", l.files*l.size>>20, l.spare>>20)
	}
	if msg := r.stderr; !strings.Contains(msg, "no space left on device") && !strings.Contains(msg, "disk is full") {
		t.Errorf("bootstrap into a full disk: exit %d, stderr %q, want it to say the disk is full", r.code, msg)
	}
	t.Logf("bootstrap into a full disk: %s", strings.TrimSpace(r.stderr))
	select {
	case <-p.cd.done:
		t.Fatalf("computerd exited during the bootstrap into a full disk: %v", p.cd.err)
	default:
	}
	// Nothing or whole entries: no file shows bytes it does not hold.
	shown := checkPrefix(t, "container", mountTree(t, p.mount), treeModel{}, m)

	if err := os.Remove(bf); err != nil {
		t.Fatal(err)
	}
	rep := p.sync("push")
	if rv := p.cli("", "verify"); rv.code != 0 {
		t.Errorf("verify after the space came back: exit %d\n%s%s", rv.code, rv.stdout, rv.stderr)
	}
	m.check(t, "container", mountTree(t, p.mount))
	m.check(t, "server", serverTree(t, p.client()))
	if fi, err := os.Stat(p.cdState + ".snapshot"); err == nil {
		t.Errorf("staging still on disk after the bootstrap (%d bytes)", fi.Size())
	}
	if again := p.sync("push"); again.Entries != 0 || again.Objects != 0 {
		t.Errorf("push after the bootstrap applied %d entries and %d chunks, want none", again.Entries, again.Objects)
	}
	t.Logf("full container disk during a bootstrap (%s, %d x %.1f KiB into %d MiB free): %d entries shown after the failure; the next push applied %d entries and %d chunks (%d bytes), rebaselined %v",
		l.name, l.files, float64(l.size)/1024, l.spare>>20, shown, rep.Entries, rep.Objects, rep.Bytes, rep.Rebaselined)

	p.stopContainer()
	if n := countRows(t, p.cdState, `SELECT count(*) FROM chunk_holds`); n != 0 {
		t.Errorf("%d chunk holds left after the bootstrap", n)
	}
	checkChunkStore(t, p.cdState)
}
