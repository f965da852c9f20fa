package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

func TestGitInsideMount(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	sh(t, m.Dir, `
		git init -q -b main repo && cd repo
		git config user.email t@example.com && git config user.name t
		mkdir -p src
		for i in $(seq 1 100); do echo "package p // $i" > src/f$i.go; done
		git add -A && git commit -q -m one
		test -z "$(git status --porcelain)"
		echo changed >> src/f7.go
		git status --porcelain | grep -q 'M src/f7.go'
		git commit -q -am two
		git gc -q
		git fsck --no-progress
		test "$(git rev-list --count HEAD)" = 2
		test -z "$(git status --porcelain)"
	`)
}

func TestSqliteInsideMount(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	for _, mode := range []string{"delete", "wal"} {
		t.Run(mode, func(t *testing.T) {
			out := sh(t, m.Dir, fmt.Sprintf(`
				sqlite3 %[1]s.db "PRAGMA journal_mode=%[1]s;" >/dev/null
				sqlite3 %[1]s.db "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
					BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5000)
					INSERT INTO t(v) SELECT printf('row %%d', x) FROM c; COMMIT;"
				sqlite3 %[1]s.db "UPDATE t SET v = 'updated' WHERE id %% 2 = 0;"
				sqlite3 %[1]s.db "PRAGMA integrity_check; SELECT count(*), sum(v = 'updated') FROM t;"
			`, mode))
			if got, want := strings.TrimSpace(out), "ok\n5000|2500"; got != want {
				t.Errorf("sqlite3 said %q, want %q", got, want)
			}
		})
	}
}

// applyFiles applies upstream file entries (path -> content; "" deletes).
func applyFiles(t *testing.T, s *vfs.Store, rev int64, files map[string]string) {
	t.Helper()
	var entries []vfs.ChangeEntry
	for path, data := range files {
		if data == "" {
			entries = append(entries, vfs.ChangeEntry{Kind: vfs.EntryDelete, Rev: rev, Path: path})
			continue
		}
		entries = append(entries, vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: rev, Path: path, Mode: 0o644, Mtime: time.Now().UnixNano()})
	}
	applyUpstream(t, s, entries, files)
}

// applyUpstream applies entries as a pull does. A file entry's bytes are
// content[its path], staged first; its Size and Chunks are set from them.
func applyUpstream(t *testing.T, s *vfs.Store, entries []vfs.ChangeEntry, content map[string]string) vfs.ApplyResult {
	t.Helper()
	ctx := context.Background()
	stage := s.Chunks().NewStage()
	defer stage.Release()
	for i := range entries {
		e := &entries[i]
		if e.Kind != vfs.EntryFile {
			continue
		}
		data := content[e.Path]
		e.Size, e.Chunks = int64(len(data)), nil
		for b := []byte(data); len(b) > 0; {
			n := min(len(b), chunkstore.ChunkSize)
			ref, err := stage.PutHashed(ctx, b[:n])
			if err != nil {
				t.Fatal(err)
			}
			e.Chunks = append(e.Chunks, ref)
			b = b[n:]
		}
	}
	res, err := s.Apply(ctx, entries, vfs.ApplyOptions{Source: vfs.Upstream, Stage: stage})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// hourCachedMount is a mount whose kernel caches entries, attributes and
// negative entries for an hour: what it shows fresh, invalidations made
// so.
func hourCachedMount(t *testing.T) *fusetest.Mount {
	return fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{
		EntryTimeout:    time.Hour,
		AttrTimeout:     time.Hour,
		NegativeTimeout: time.Hour,
	}})
}

// TestUpstreamApplyIsVisibleAtOnce caches everything in the kernel for an
// hour, then applies from outside: cat, ls and stat must see the new state
// as soon as the invalidations are delivered, not when a cache expires.
func TestUpstreamApplyIsVisibleAtOnce(t *testing.T) {
	m := hourCachedMount(t)
	ctx := context.Background()
	applyFiles(t, m.Store, 1, map[string]string{"news.txt": "v1", "dir/old.txt": "old"})
	if err := m.Server.WaitInvalidated(ctx); err != nil {
		t.Fatal(err)
	}
	// Warm every cache: pages, attributes, entries, and a negative entry.
	sh(t, m.Dir, `cat news.txt dir/old.txt >/dev/null; stat news.txt >/dev/null; ls dir >/dev/null; ! stat dir/added.txt 2>/dev/null`)

	applyFiles(t, m.Store, 2, map[string]string{
		"news.txt":      "version two, longer than the first",
		"dir/added.txt": "new file",
		"dir/old.txt":   "",
	})
	if err := m.Server.WaitInvalidated(ctx); err != nil {
		t.Fatal(err)
	}
	out := sh(t, m.Dir, `cat news.txt; echo; stat -c %s news.txt; ls dir; cat dir/added.txt; echo; test ! -e dir/old.txt && echo old-gone`)
	want := "version two, longer than the first\n34\nadded.txt\nnew file\nold-gone\n"
	if out != want {
		t.Errorf("inside the mount after apply:\n%s\nwant:\n%s", out, want)
	}

	// Without waiting: delivery is prompt on its own.
	applyFiles(t, m.Store, 3, map[string]string{"news.txt": "v3"})
	eventually(t, 2*time.Second, "cat to show v3", func() bool {
		b, _ := os.ReadFile(m.Path("news.txt"))
		return string(b) == "v3"
	})
	if st := m.Server.Stats(); st.Invalidations == 0 {
		t.Errorf("no invalidation reached the kernel: %+v", st)
	}
}

// TestNewSubtreeNeedsNoInvalidations: an apply that brings a whole subtree
// invalidates the entry of its top (a negative one the kernel cached) and
// the attributes of the directory holding it, and nothing inside: the
// kernel cannot hold what the commit made. What it then shows is the new
// tree, at once, with every cache held for an hour.
func TestNewSubtreeNeedsNoInvalidations(t *testing.T) {
	m := hourCachedMount(t)
	ctx := context.Background()
	applyFiles(t, m.Store, 1, map[string]string{"dir/old.txt": "old"})
	if err := m.Server.WaitInvalidated(ctx); err != nil {
		t.Fatal(err)
	}
	// Negative entries for the tops of both new subtrees.
	sh(t, m.Dir, `ls dir >/dev/null; ! stat new 2>/dev/null; ! stat dir/sub 2>/dev/null`)
	before := m.Server.Stats()

	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("new/d%d/f%d", i%10, i)] = fmt.Sprint("file ", i)
		files[fmt.Sprintf("dir/sub/d%d/g%d", i%7, i)] = fmt.Sprint("other ", i)
	}
	applyFiles(t, m.Store, 2, files)
	if err := m.Server.WaitInvalidated(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, m.Dir, `find new dir/sub -type f | wc -l; cat new/d3/f13; echo; cat dir/sub/d6/g13`); got != "400\nfile 13\nother 13" {
		t.Errorf("the new subtrees inside the mount: %q", got)
	}
	after := m.Server.Stats()
	sent := after.Invalidations + after.InvalidationsUnknown - before.Invalidations - before.InvalidationsUnknown
	// The entries new and dir/sub, and the attributes of / and dir.
	if sent != 4 {
		t.Errorf("%d notifications for two new subtrees of 400 files, want 4", sent)
	}
}

// TestInvalidationOverflowSweeps applies more changes than the queue holds;
// the sweep that replaces them must still make every change visible.
func TestInvalidationOverflowSweeps(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{
		EntryTimeout: time.Hour, AttrTimeout: time.Hour, InvalidationQueue: 4,
	}})
	files := map[string]string{}
	for i := range 20 {
		files["f"+strconv.Itoa(i)] = "a"
	}
	applyFiles(t, m.Store, 1, files)
	m.Server.WaitInvalidated(context.Background())
	sh(t, m.Dir, `cat f* >/dev/null`)
	for k := range files {
		files[k] = "bb"
	}
	applyFiles(t, m.Store, 2, files)
	m.Server.WaitInvalidated(context.Background())
	if got := sh(t, m.Dir, `cat f* | tr -d '\n'`); got != strings.Repeat("bb", 20) {
		t.Errorf("after overflow: %q", got)
	}
	if st := m.Server.Stats(); st.InvalidationSweeps == 0 {
		t.Errorf("no sweep counted: %+v", st)
	}
}

// TestFlushRuleShowsOpenFiles: bytes a still-running process wrote (and did
// not close) reach the change feed once the handles are flushed.
func TestFlushRuleShowsOpenFiles(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const content = "written by a process that is still running"
	cmd := helperCmd(ctx, "hold-open", m.Path("held.txt"), content)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	if n := m.Server.DirtyHandles(); n != 1 {
		t.Errorf("dirty handles %d, want 1", n)
	}

	if err := m.Store.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	var found *vfs.ChangeEntry
	for e, err := range m.Store.Changes(ctx, watermark.Cursor{}, watermark.At(m.Store.CurrentRev()), vfs.Ignore{}) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Path == "held.txt" {
			found = &e
		}
	}
	if found == nil || found.Size != int64(len(content)) {
		t.Fatalf("feed entry for the open file: %+v, want size %d", found, len(content))
	}
	if got := storeFile(t, m, "held.txt"); got != content {
		t.Errorf("store has %q", got)
	}
	if n := m.Server.DirtyHandles(); n != 0 {
		t.Errorf("dirty handles after flush %d, want 0", n)
	}
}

// TestWrite1GiBFlatMemory writes 1 GiB through the mount with dd and checks
// that this process (the FUSE server) does not grow with the file, then
// reads it back through the mount and compares checksums.
func TestWrite1GiBFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1 GiB")
	}
	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		shm = ""
	}
	m := fusetest.NewMount(t, fusetest.Options{StoreDir: shm})

	// 64 MiB of random bytes, written 16 times: the chunks repeat, but
	// every byte still goes through the handle, the hashing and the
	// commit, and a source file keeps the pipeline's own CPU small.
	srcDir := t.TempDir()
	if shm != "" {
		d, err := os.MkdirTemp(shm, "fusefs-src-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		srcDir = d
	}
	src := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{7}).Read(src)
	if err := os.WriteFile(srcDir+"/src", src, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	for range 16 {
		sum.Write(src)
	}
	want := hex.EncodeToString(sum.Sum(nil))
	src = nil
	runtime.GC()

	before := procStatusKB(t, "VmRSS")
	stop := make(chan struct{})
	peak := make(chan int64)
	go func() {
		// Sampled as well as VmHWM, which clear_refs may not reset.
		hi := before
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				peak <- hi
				return
			case <-tick.C:
				hi = max(hi, procStatusKB(t, "VmRSS"))
			}
		}
	}()
	hwmReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	start := time.Now()
	sh(t, m.Dir, `for i in $(seq 16); do cat `+srcDir+`/src; done | dd bs=1M iflag=fullblock conv=fsync status=none of=big`)
	elapsed := time.Since(start)
	close(stop)
	sampled := <-peak
	hwm := procStatusKB(t, "VmHWM")
	top := sampled
	if hwmReset {
		top = max(top, hwm)
	}
	growthMiB := float64(top-before) / 1024
	t.Logf("1 GiB through the mount in %v (%.0f MB/s); RSS %d KiB before, peak %d KiB (sampled %d, VmHWM %d, reset %v): growth %.1f MiB",
		elapsed.Round(time.Millisecond), float64(1<<30)/elapsed.Seconds()/1e6, before, top, sampled, hwm, hwmReset, growthMiB)
	if growthMiB > 256 {
		t.Errorf("RSS grew %.1f MiB writing 1 GiB, bound 256 MiB", growthMiB)
	}

	if st := stat(t, m.Path("big")); st.Size != 1<<30 {
		t.Fatalf("size %d", st.Size)
	}
	a, err := m.Store.Stat(context.Background(), "big")
	if err != nil || a.Size != 1<<30 {
		t.Fatalf("store stat: %+v %v", a, err)
	}
	if got := strings.TrimSpace(sh(t, m.Dir, `sha256sum big | cut -d' ' -f1`)); got != want {
		t.Errorf("read back sha256 %s, wrote %s", got, want)
	}
}

// procStatusKB reads a "kB" field of /proc/self/status.
func procStatusKB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestKeepCache: a second open of an unchanged file is served from the
// kernel's page cache (no READ reaches us); after our own write, and after
// an upstream apply, the new bytes are read.
func TestKeepCache(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
	data := strings.Repeat("k", 1<<20)
	writeFile(t, m.Path("f"), data)
	reads := func() uint64 { return m.Server.Stats().Ops["read"].Count }

	readFile(t, m.Path("f"))
	readFile(t, m.Path("f")) // the first open after the write may still read
	before := reads()
	if got := readFile(t, m.Path("f")); got != data {
		t.Fatal("content differs")
	}
	if after := reads(); after != before {
		t.Errorf("re-reading an unchanged file sent %d READs, want 0", after-before)
	}

	writeFile(t, m.Path("f"), "local change")
	if got := readFile(t, m.Path("f")); got != "local change" {
		t.Errorf("after a local write: %q", got)
	}
	applyFiles(t, m.Store, 1, map[string]string{"f": "upstream change"})
	if err := m.Server.WaitInvalidated(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, m.Path("f")); got != "upstream change" {
		t.Errorf("after an apply: %q", got)
	}
}

// TestAppliesWhileBusy applies upstream batches in a loop while processes
// read, create, list and remove in the same directory: invalidations and
// FUSE requests must not deadlock, and the last applied state must show.
func TestAppliesWhileBusy(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
	applyFiles(t, m.Store, 1, map[string]string{"dir/a0": "0"})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for rev := int64(2); ; rev++ {
			select {
			case <-done:
				return
			default:
			}
			files := map[string]string{}
			for i := range 10 {
				files[fmt.Sprintf("dir/a%d", i)] = strconv.FormatInt(rev, 10)
			}
			if rev%7 == 0 {
				files["dir/a9"] = "" // deletes too
			}
			applyFiles(t, m.Store, rev, files)
		}
	}()
	finished := make(chan string, 1)
	go func() {
		out, err := shErr(m.Dir, `for i in $(seq 80); do
			cat dir/a* >/dev/null 2>&1 || true
			echo x > dir/local$i; ls dir >/dev/null; mv dir/local$i dir/moved$i; rm -f dir/moved$i
		done`)
		if err != nil {
			out += err.Error()
		}
		finished <- out
	}()
	select {
	case out := <-finished:
		if out != "" {
			t.Errorf("shell: %s", out)
		}
	case <-time.After(3 * time.Minute): // about 20 s on an idle 2-core machine; this only catches a deadlock
		t.Fatal("no progress in 3 minutes: deadlock between applies and FUSE requests?")
	}
	close(done)
	wg.Wait()
	applyFiles(t, m.Store, 1<<40, map[string]string{"dir/a0": "final"})
	if err := m.Server.WaitInvalidated(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, m.Path("dir/a0")); got != "final" {
		t.Errorf("dir/a0 = %q after the last apply", got)
	}
}

// TestReadsAfterReadAheadSeeEveryWrite: files of several directories
// (distinct bytes, and every fifth the same bytes) read back cold through
// the mount, so the store reads each directory's small files ahead, then
// a third of them rewritten (new bytes, the same bytes as another file,
// shorter, longer) and read back cold again: every read returns what was
// last written.
func TestReadsAfterReadAheadSeeEveryWrite(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	want := map[string][]byte{}
	content := func(d, i, gen int) []byte {
		if i%5 == 0 {
			return []byte("module.exports = 1\n")
		}
		return []byte(strings.Repeat(fmt.Sprintf("d%d f%d gen%d;", d, i, gen), 1+(i*37+gen)%200))
	}
	var names []string
	for d := range 4 {
		dir := m.Path(fmt.Sprintf("d%d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			p := fmt.Sprintf("%s/f%02d", dir, i)
			want[p] = content(d, i, 0)
			names = append(names, p)
			if err := os.WriteFile(p, want[p], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	coldRead := func(round string) {
		t.Helper()
		for _, p := range names {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			// Drop the file's pages so the read reaches the daemon.
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				f.Close()
				t.Fatal(err)
			}
			got, err := io.ReadAll(f)
			f.Close()
			if err != nil || !bytes.Equal(got, want[p]) {
				t.Fatalf("%s: %s read %d bytes (%v), want %d", round, p, len(got), err, len(want[p]))
			}
		}
	}
	aheadRows := func() float64 {
		t.Helper()
		mfs, err := metrics.Gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "wsync_vfs_read_ahead_rows_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	before := aheadRows()
	coldRead("first read")
	if got := aheadRows() - before; got < 100 {
		t.Errorf("the first read read %v rows ahead, want most of the 240 files'", got)
	}
	for k, p := range names {
		if k%3 != 0 {
			continue
		}
		var d, i int
		if _, err := fmt.Sscanf(p[len(m.Dir):], "/d%d/f%d", &d, &i); err != nil {
			t.Fatal(err)
		}
		want[p] = content(d, i+1, 1)
		if err := os.WriteFile(p, want[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	coldRead("after rewrites")
}

// TestReadsDuringRewritesEndOnTheLastWrite: readers read files of four
// directories over and over, some cold (their pages dropped, so the store
// reads them ahead from several FUSE requests at once), while a writer
// truncates and rewrites them; once the writer is done, every file reads
// its last version, cold and warm. (During the rewrites a read may see a
// torn state, zeros included: the kernel's page cache does that on any
// FUSE mount without passthrough, go-fuse's loopback without passthrough
// as often as ours, and the daemon never answers a READ with them; see
// docs/ARCHITECTURE.md, "Reads during a rewrite".)
func TestReadsDuringRewritesEndOnTheLastWrite(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	version := func(p string, v int) []byte {
		return []byte(strings.Repeat(fmt.Sprintf("%s v%d;", p, v), 1+v%7))
	}
	var names []string
	for d := range 4 {
		if err := os.Mkdir(m.Path(fmt.Sprintf("d%d", d)), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			p := m.Path(fmt.Sprintf("d%d/f%02d", d, i))
			names = append(names, p)
			if err := os.WriteFile(p, version(p, 0), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(p string, cold bool) ([]byte, error) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if cold {
			// Drop the file's pages so the read reaches the daemon.
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				return nil, err
			}
		}
		return io.ReadAll(f)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 6 {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				if _, err := read(names[(k*7+r*31)%len(names)], r%2 == 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	last := make(map[string]int)
	for v := 1; v < 40; v++ {
		for i, p := range names {
			if i%5 != v%5 {
				continue
			}
			if err := os.WriteFile(p, version(p, v), 0o644); err != nil {
				t.Fatal(err)
			}
			last[p] = v
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, cold := range []bool{false, true} {
		for _, p := range names {
			got, err := read(p, cold)
			if want := version(p, last[p]); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s after the rewrites (cold %v): read %q (%v), want %q", p, cold, got, err, want)
			}
		}
	}
}

// Cold reads of a large file are answered from its chunk files (the
// kernel splices the reply), and every one returns the file's last
// bytes: after a rewrite of part of it through another descriptor, after
// a truncate, and while a writer holds bytes it has not committed.
func TestSplicedReadsSeeEveryWrite(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("big")
	want := make([]byte, 6*chunkstore.ChunkSize+12345)
	rng := rand.NewChaCha8([32]byte{1, 2})
	rng.Read(want)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	coldRead := func(round string) {
		t.Helper()
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// Reads of 128 KiB, each its own READ whatever the mount's
		// read-ahead (1 MiB READs span two chunks and are copied).
		for _, advice := range []int{unix.FADV_DONTNEED, unix.FADV_RANDOM} {
			if err := unix.Fadvise(int(f.Fd()), 0, 0, advice); err != nil {
				t.Fatal(err)
			}
		}
		var got []byte
		buf := make([]byte, 128<<10)
		for {
			n, err := f.ReadAt(buf, int64(len(got)))
			got = append(got, buf[:n]...)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", round, err)
			}
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: %d bytes read, want %d; first difference at %d", round, len(got), len(want), i)
		}
	}
	spliced := m.Server.Stats().SplicedBytes
	coldRead("first read")
	if got := m.Server.Stats().SplicedBytes - spliced; got < 4*chunkstore.ChunkSize {
		t.Fatalf("%d bytes spliced of %d read", got, len(want))
	}

	// A rewrite of part of two chunks, committed at close.
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte("rewritten "), 30000)
	off := 2*chunkstore.ChunkSize - 1000
	if _, err := w.WriteAt(patch, int64(off)); err != nil {
		t.Fatal(err)
	}
	copy(want[off:], patch)
	// Before the close: the writer's bytes are held, not committed; a
	// reader through another descriptor sees them.
	coldRead("with the rewrite held")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	coldRead("after the rewrite")

	if err := os.Truncate(p, 3*chunkstore.ChunkSize+7); err != nil {
		t.Fatal(err)
	}
	want = want[:3*chunkstore.ChunkSize+7]
	coldRead("after the truncate")
}

// The mount's read-ahead is set to Options.MaxReadAhead (the kernel keeps
// a FUSE mount's at 128 KiB otherwise, whatever the INIT reply asks): a
// cold sequential read of a large file comes in READs of 1 MiB.
func TestSequentialReadsComeInLargeREADs(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	var st unix.Stat_t
	if err := unix.Stat(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	ra := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(ra)
	if err != nil {
		t.Skipf("no read-ahead setting for the mount (%v)", err)
	}
	if got := strings.TrimSpace(string(b)); got != "1024" {
		if werr := os.WriteFile(ra, b, 0); werr != nil {
			t.Skipf("sysfs cannot be written here (%v): the mount keeps the kernel's read-ahead", werr)
		}
		t.Fatalf("%s = %s, want 1024", ra, got)
	}

	const size = 16 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{3}).Read(data)
	p := m.Path("big")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	before := m.Server.Stats().Ops["read"].Count
	got, err := io.ReadAll(bufio.NewReaderSize(f, 1<<20))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, size)
	}
	// 16 READs of 1 MiB; the kernel's default would make 128 of 128 KiB.
	if reads := m.Server.Stats().Ops["read"].Count - before; reads > 32 {
		t.Errorf("%d READs for a sequential read of %d MiB", reads, size>>20)
	}
}
