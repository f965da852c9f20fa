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
// fits. The sync must fail with a clear error, keep everything committed
// before, leave the sending side's cursor at what was applied, and
// complete once the ballast is gone. (A full disk under a write through
// the mount is fusefs's test.)

const (
	fullTmpfs  = 64 << 20 // the tmpfs
	fullSpare  = 6 << 20  // left free by the ballast
	fullFiles  = 12       // workload files of fullFileSz: 30 MiB, five times the spare room
	fullFileSz = 5 << 19
)

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
	p := newPair(t, pairOpts{separate: "disk", stateTmpfs: fullTmpfs})
	c := p.client()
	rng := rand.New(rand.NewPCG(9, 9))
	server := apiSide{t: t, c: c}
	m := treeModel{}
	genPhase(rng, m, server, 1)
	p.sync("push")
	base := maps.Clone(m)
	stateDir := filepath.Dir(p.cdState)
	bf := ballast(t, stateDir, fullSpare)

	server.mkdir("/big")
	m["/big"] = "dir"
	for i := range fullFiles {
		b := randomBytes(rng, fullFileSz)
		pth := fmt.Sprintf("/big/%02d", i)
		server.write(pth, b)
		m[pth] = "file:" + sum(b)
	}
	r := p.cli("", "push")
	if r.code == 0 {
		t.Fatalf("a push of %d MiB into %d MiB of free space succeeded", fullFiles*fullFileSz>>20, fullSpare>>20)
	}
	if !strings.Contains(r.stderr, "no space left on device") {
		t.Errorf("push into a full disk: exit %d, stderr %q, want it to say no space left on device", r.code, r.stderr)
	}
	t.Logf("push into a full disk: %s", strings.TrimSpace(r.stderr))
	// Everything committed before is there; of the push, only whole files.
	applied := checkPrefix(t, "container", mountTree(t, p.mount), base, m)
	st := p.remoteStatus()
	if !st.Container.AppliedPush.Watermark().Covers(st.Server.Push.Watermark()) {
		t.Errorf("server's push cursor %+v is past what the container applied (%+v)", st.Server.Push, st.Container.AppliedPush)
	}
	if st.Server.Push.Watermark().Covers(watermark.At(st.Server.CurrentRev)) {
		t.Errorf("server's push cursor %+v reached its current rev %d though the push failed", st.Server.Push, st.Server.CurrentRev)
	}

	// Free the space: the next push completes.
	if err := os.Remove(bf); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	rep := p.sync("push")
	recover := time.Since(t0)
	if rv := p.cli("", "verify"); rv.code != 0 {
		t.Errorf("verify after the space came back: exit %d\n%s%s", rv.code, rv.stdout, rv.stderr)
	}
	m.check(t, "server", serverTree(t, c))
	m.check(t, "container", mountTree(t, p.mount))
	if rep.Skipped > 256 {
		t.Errorf("the push after the full disk re-sent %d entries the container had, want at most one batch", rep.Skipped)
	}
	t.Logf("full container disk: %d workload entries applied before the disk filled; after freeing space the push applied %d, re-sent %d already applied, in %v",
		applied, rep.Entries, rep.Skipped, recover.Round(time.Millisecond))
}

func TestFullServerDiskDuringPull(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", dataTmpfs: fullTmpfs})
	c := p.client()
	rng := rand.New(rand.NewPCG(7, 7))
	container := mountSide{t: t, root: p.mount}
	m := treeModel{}
	genPhase(rng, m, container, 1)
	p.sync("pull")
	base := maps.Clone(m)
	bf := ballast(t, p.data, fullSpare)
	before := p.remoteStatus()

	container.mkdir("/big")
	m["/big"] = "dir"
	for i := range fullFiles {
		b := randomBytes(rng, fullFileSz)
		pth := fmt.Sprintf("/big/%02d", i)
		container.write(pth, b)
		m[pth] = "file:" + sum(b)
	}
	r := p.cli("", "pull")
	if r.code == 0 {
		t.Fatalf("a pull of %d MiB into %d MiB of free space succeeded", fullFiles*fullFileSz>>20, fullSpare>>20)
	}
	if !strings.Contains(r.stderr, "no space left on device") {
		t.Errorf("pull into a full disk: exit %d, stderr %q, want it to say no space left on device", r.code, r.stderr)
	}
	t.Logf("pull into a full disk: %s", strings.TrimSpace(r.stderr))
	applied := checkPrefix(t, "server", serverTree(t, c), base, m)
	after := p.remoteStatus()
	// The fetch cursor moved at most past the batches the server applied:
	// never to the container's current rev.
	if after.Server.Fetch.Watermark().Covers(watermark.At(after.Container.CurrentRev)) {
		t.Errorf("server's fetch cursor %+v reached the container's rev %d though the pull failed", after.Server.Fetch, after.Container.CurrentRev)
	}
	if !after.Server.Fetch.Watermark().Covers(before.Server.Fetch.Watermark()) {
		t.Errorf("fetch cursor went back: %+v -> %+v", before.Server.Fetch, after.Server.Fetch)
	}

	if err := os.Remove(bf); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	rep := p.sync("pull")
	recover := time.Since(t0)
	if rv := p.cli("", "verify"); rv.code != 0 {
		t.Errorf("verify after the space came back: exit %d\n%s%s", rv.code, rv.stdout, rv.stderr)
	}
	m.check(t, "server", serverTree(t, c))
	m.check(t, "container", mountTree(t, p.mount))
	if rep.Skipped > 256 {
		t.Errorf("the pull after the full disk re-fetched %d entries the server had, want at most one batch", rep.Skipped)
	}
	t.Logf("full server disk: %d workload entries applied before the disk filled; after freeing space the pull applied %d, re-fetched %d already applied, in %v",
		applied, rep.Entries, rep.Skipped, recover.Round(time.Millisecond))
}
