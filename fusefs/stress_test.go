package fusefs_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// The multi-process stress run: several worker processes (this test
// binary, helper "stress") create, write, append, truncate, rename, link,
// unlink, mkdir and rmdir in a private directory each and in shared
// directories they all use, each logging its successful operations. Then
// the mount, the store read directly and a store pulled from the store's
// change feed are compared with each other and with what the logs imply:
//
//   - a worker's private directory is exactly its model (names, kinds,
//     bytes, hardlink groups);
//   - every file in the shared directories is one complete version some
//     worker logged as published (its header names the writer and version,
//     and the rest of its bytes must be that version's);
//   - the shared append log holds every record the workers logged, each
//     once and whole, and nothing else;
//   - fsck: every entry resolves, a file's nlink is its number of names,
//     sizes match manifests, the mount and the store agree on inodes.
//
//	WSYNC_STRESS_SEED=n     replays seed n (logged on every run)
//	WSYNC_STRESS_OPS=n      sets the operations per worker
//	WSYNC_STRESS_WORKERS=n  sets the number of workers
//	WSYNC_LONG=1            runs 5x the default count

const (
	stressDefaultOps     = 1500
	stressDefaultWorkers = 4
	stressSharedDirs     = 3
	stressSharedNames    = 6
	stressRecordLen      = 64
	stressLog            = "shared/append.log"
	// stressBlocks is a file every worker writes at once, each in its
	// own region; the regions straddle chunk boundaries, so workers share
	// chunks.
	stressBlocks = "shared/blocks"
	stressRegion = 300 << 10
)

func init() { helpers["stress"] = helperStress }

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

func TestStressProcesses(t *testing.T) {
	ops := stressDefaultOps
	if os.Getenv("WSYNC_LONG") == "1" {
		ops *= 5
	}
	ops = envInt(t, "WSYNC_STRESS_OPS", ops)
	workers := envInt(t, "WSYNC_STRESS_WORKERS", stressDefaultWorkers)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WSYNC_STRESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WSYNC_STRESS_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d, %d workers x %d ops (replay the ops of each worker: WSYNC_STRESS_SEED=%d; the interleaving is the kernel's)",
		seed, workers, ops, seed)

	m := fusetest.NewMount(t, fusetest.Options{})
	for i := range stressSharedDirs {
		if err := os.MkdirAll(m.Path(fmt.Sprintf("shared/s%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	cmds := make([]*exec.Cmd, workers)
	outs := make([]*bytes.Buffer, workers)
	for w := range workers {
		cmds[w] = helperCmd(ctx, "stress", m.Dir, strconv.Itoa(w), strconv.FormatUint(seed, 10), strconv.Itoa(ops),
			filepath.Join(logDir, fmt.Sprintf("w%d.log", w)))
		outs[w] = new(bytes.Buffer)
		cmds[w].Stdout, cmds[w].Stderr = outs[w], outs[w]
		if err := cmds[w].Start(); err != nil {
			t.Fatal(err)
		}
	}
	failed := false
	for w, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = true
			t.Errorf("worker %d (seed %d): %v\n%s", w, seed, err, outs[w])
		}
	}
	elapsed := time.Since(start)
	if failed {
		t.FailNow()
	}
	t.Logf("%d workers x %d ops in %v: %.0f ops/s", workers, ops, elapsed.Round(time.Millisecond),
		float64(workers*ops)/elapsed.Seconds())

	// What the logs imply.
	want := stressExpect{private: map[string]stressEntry{}, published: map[string]bool{}, records: map[string]int{}}
	var blocks []byte // the blocks file as the workers' regions imply
	for w := range workers {
		var res stressResult
		if err := json.Unmarshal(bytes.TrimSpace(lastLine(outs[w].Bytes())), &res); err != nil {
			t.Fatalf("worker %d result: %v\n%s", w, err, outs[w])
		}
		if len(res.Region) > 0 {
			if end := w*stressRegion + len(res.Region); end > len(blocks) {
				blocks = append(blocks, make([]byte, end-len(blocks))...)
			}
			copy(blocks[w*stressRegion:], res.Region)
		}
		for p, e := range res.Private {
			want.private[p] = stressEntry{Kind: e.Kind, Sha: e.Sha, Group: fmt.Sprintf("w%d.%d", w, e.Group)}
		}
		readStressLog(t, filepath.Join(logDir, fmt.Sprintf("w%d.log", w)), &want)
	}

	for w := range workers {
		t.Logf("%s", bytes.SplitN(outs[w].Bytes(), []byte("\n"), 2)[0])
	}
	want.blocks = blocks
	if len(want.published) == 0 || len(want.records) == 0 || len(want.private) < workers || len(blocks) == 0 {
		t.Fatalf("the workers did too little to check: %d versions published, %d records, %d private names",
			len(want.published), len(want.records), len(want.private))
	}

	phase := time.Now()
	mount := walkMount(t, m.Dir)
	store := walkStore(t, m.Store)
	checkStressTree(t, "mount", mount, want)
	checkStressTree(t, "store", store, want)
	if d := diffWalks(mount, store, true); d != "" {
		t.Errorf("the mount and the store differ:\n%s", d)
	}
	fsckStore(t, m.Store)
	t.Logf("%d names checked in the mount and the store in %v", len(mount), time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	pulled := pullStore(t, m.Store)
	if d := diffWalks(store, walkStore(t, pulled), false); d != "" {
		t.Errorf("the store and a store pulled from its change feed differ:\n%s", d)
	}
	t.Logf("pulled and compared in %v", time.Since(phase).Round(time.Millisecond))
}

func lastLine(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// stressEntry is one name as a worker's model or a walk sees it.
type stressEntry struct {
	Kind  string // "file" or "dir"
	Sha   string // files
	Group string // files: names of one inode share it (the model's id, or the inode number)
	Nlink uint32
	Size  int64
	Data  []byte `json:"-"`
}

type stressResult struct {
	Private map[string]struct {
		Kind  string
		Sha   string
		Group int
	}
	// Region is the worker's region of the shared blocks file as it
	// wrote it, up to its last written byte.
	Region []byte
}

type stressExpect struct {
	private   map[string]stressEntry
	published map[string]bool // "w.v"
	records   map[string]int  // append log records, counted
	blocks    []byte          // the blocks file
}

// readStressLog reads a worker's log of successful operations: publish
// lines name versions that may appear in shared names; append lines name
// records that must be in the append log.
func readStressLog(t *testing.T, file string, want *stressExpect) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch fields[0] {
		case "publish":
			want.published[fields[2]] = true
		case "append-log":
			want.records[stressRecord(fields[1])]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// stressRecord is the append log record with id, stressRecordLen bytes.
func stressRecord(id string) string {
	r := "record " + id + " "
	return r + strings.Repeat("=", stressRecordLen-len(r)-1) + "\n"
}

// stressVersion is version v of worker w's shared content: a header naming
// it, then bytes derived from it, 0 to about 1.2 MiB.
func stressVersion(w, v int) []byte {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(v)))
	n := rng.IntN(8 << 10)
	switch rng.IntN(20) {
	case 0:
		n = rng.IntN(1200 << 10)
	case 1, 2, 3:
		n = rng.IntN(160 << 10)
	}
	b := fmt.Appendf(nil, "version %d.%d %d\n", w, v, n)
	for range n {
		b = append(b, byte(rng.Uint32()))
	}
	return b
}

// checkStressTree compares a walk with the logs' implications.
func checkStressTree(t *testing.T, what string, got map[string]stressEntry, want stressExpect) {
	t.Helper()
	// Private directories: exactly the models.
	groups := map[string]string{} // model group -> walk group
	for p, w := range want.private {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s: %s (%s) is missing", what, p, w.Kind)
		case g.Kind != w.Kind:
			t.Errorf("%s: %s is a %s, the model's is a %s", what, p, g.Kind, w.Kind)
		case w.Kind == "file" && g.Sha != w.Sha:
			t.Errorf("%s: %s has content %s (%d bytes), the model's is %s", what, p, g.Sha[:12], g.Size, w.Sha[:12])
		case w.Kind == "file":
			if prev, seen := groups[w.Group]; seen && prev != g.Group {
				t.Errorf("%s: %s is inode %s, its hardlink siblings are %s", what, p, g.Group, prev)
			}
			groups[w.Group] = g.Group
		}
	}
	seenGroups := map[string]string{} // walk group -> model group
	for p, g := range got {
		if !strings.HasPrefix(p, "p") {
			continue
		}
		w, ok := want.private[p]
		if !ok {
			t.Errorf("%s: %s (%s) should not exist", what, p, g.Kind)
			continue
		}
		if g.Kind == "file" {
			if prev, seen := seenGroups[g.Group]; seen && prev != w.Group {
				t.Errorf("%s: %s shares inode %s with a name the model keeps apart", what, p, g.Group)
			}
			seenGroups[g.Group] = w.Group
		}
	}
	// Shared names: complete published versions.
	var records []string
	for p, g := range got {
		if !strings.HasPrefix(p, "shared/") || g.Kind != "file" {
			continue
		}
		if p == stressBlocks {
			if !bytes.Equal(g.Data, want.blocks) {
				i := firstDiff(g.Data, want.blocks)
				t.Errorf("%s: %s differs from the workers' regions: %d bytes, want %d; first difference at %d (region of worker %d)",
					what, p, len(g.Data), len(want.blocks), i, i/stressRegion)
			}
			continue
		}
		if p == stressLog {
			for rec := range strings.Lines(string(g.Data)) {
				records = append(records, rec)
			}
			continue
		}
		var w, v, n int
		if _, err := fmt.Sscanf(string(g.Data), "version %d.%d %d\n", &w, &v, &n); err != nil {
			t.Errorf("%s: %s holds bytes no one wrote: %q...", what, p, g.Data[:min(len(g.Data), 40)])
			continue
		}
		if !want.published[fmt.Sprintf("%d.%d", w, v)] {
			t.Errorf("%s: %s holds version %d.%d, which no log names as published", what, p, w, v)
		}
		if exp := stressVersion(w, v); !bytes.Equal(g.Data, exp) {
			t.Errorf("%s: %s holds version %d.%d with other bytes (%d bytes, want %d; first difference at %d)",
				what, p, w, v, len(g.Data), len(exp), firstDiff(g.Data, exp))
		}
	}
	// The append log: every logged record once, nothing else.
	count := map[string]int{}
	for _, r := range records {
		count[r]++
	}
	for r, n := range want.records {
		if count[r] != n {
			t.Errorf("%s: record %q appears %d times in the log, the workers appended it %d times", what, strings.TrimSpace(r), count[r], n)
		}
	}
	for r, n := range count {
		if want.records[r] == 0 {
			t.Errorf("%s: the log holds %d x %q, which no worker appended", what, n, strings.TrimSpace(r))
		}
	}
	// nlink is the number of names of each inode.
	names := map[string]int{}
	for _, g := range got {
		if g.Kind == "file" {
			names[g.Group]++
		}
	}
	for p, g := range got {
		if g.Kind == "file" && int(g.Nlink) != names[g.Group] {
			t.Errorf("%s: %s (inode %s) has nlink %d and %d names", what, p, g.Group, g.Nlink, names[g.Group])
		}
	}
}

// walkMount lists the mount through the kernel.
func walkMount(t *testing.T, root string) map[string]stressEntry {
	t.Helper()
	out := map[string]stressEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return fmt.Errorf("lstat %s: %w", rel, err)
		}
		e := stressEntry{Kind: "dir", Group: strconv.FormatUint(st.Ino, 10), Nlink: uint32(st.Nlink), Size: st.Size}
		if !d.IsDir() {
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s: unexpected type %v", rel, d.Type())
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if int64(len(b)) != st.Size {
				return fmt.Errorf("%s: read %d bytes, stat says %d", rel, len(b), st.Size)
			}
			e.Kind, e.Data, e.Sha = "file", b, sha(b)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("walk the mount: %v", err)
	}
	return out
}

// walkStore lists a store through its API, not the mount.
func walkStore(t *testing.T, s *vfs.Store) map[string]stressEntry {
	t.Helper()
	out := map[string]stressEntry{}
	eachStoreEntry(t, s, "store", func(p string, _ vfs.DirEntry, a vfs.Attr) {
		e := stressEntry{Group: strconv.FormatUint(uint64(a.Ino), 10), Nlink: a.Nlink, Size: a.Size}
		switch a.Kind {
		case vfs.KindDir:
			e.Kind = "dir"
		case vfs.KindFile:
			b, err := s.ReadFile(context.Background(), p)
			if err != nil {
				t.Fatalf("store read %s: %v", p, err)
			}
			e.Kind, e.Data, e.Sha = "file", b, sha(b)
		default:
			t.Errorf("store: %s is a %v", p, a.Kind)
			return
		}
		out[p] = e
	})
	return out
}

// eachStoreEntry calls fn, depth first, for every entry of s with its
// dirent and the attributes its path resolves to. An entry that does not
// resolve is an error of the test, which who names.
func eachStoreEntry(t *testing.T, s *vfs.Store, who string, fn func(p string, de vfs.DirEntry, a vfs.Attr)) {
	t.Helper()
	ctx := context.Background()
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := s.List(ctx, dir)
		if err != nil {
			t.Fatalf("store list %q: %v", dir, err)
		}
		for _, de := range ents {
			p := path.Join(dir, de.Name)
			a, err := s.Stat(ctx, p)
			if err != nil {
				t.Errorf("%s: %s does not resolve: %v", who, p, err)
				continue
			}
			fn(p, de, a)
			if a.Kind == vfs.KindDir {
				walk(p)
			}
		}
	}
	walk("")
}

// diffWalks lists the differences of two walks: names, kinds, bytes, and
// with sameInodes the inode numbers and link counts too.
func diffWalks(a, b map[string]stressEntry, sameInodes bool) string {
	var d []string
	for p, x := range a {
		y, ok := b[p]
		switch {
		case !ok:
			d = append(d, "only in the first: "+p)
		case x.Kind != y.Kind || x.Sha != y.Sha || x.Size != y.Size:
			d = append(d, fmt.Sprintf("%s: %s %d bytes %.12s vs %s %d bytes %.12s", p, x.Kind, x.Size, x.Sha, y.Kind, y.Size, y.Sha))
		case sameInodes && (x.Group != y.Group || (x.Kind == "file" && x.Nlink != y.Nlink)):
			d = append(d, fmt.Sprintf("%s: inode %s nlink %d vs inode %s nlink %d", p, x.Group, x.Nlink, y.Group, y.Nlink))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, "only in the second: "+p)
		}
	}
	sort.Strings(d)
	if len(d) > 30 {
		d = append(d[:30], fmt.Sprintf("... and %d more", len(d)-30))
	}
	return strings.Join(d, "\n")
}

// fsckStore checks the store's own invariants: every dirent resolves to a
// node of its kind, a file's size is its manifest's and its nlink its
// number of names.
func fsckStore(t *testing.T, s *vfs.Store) {
	t.Helper()
	ctx := context.Background()
	names := map[vfs.Ino]int{}
	nlink := map[vfs.Ino]uint32{}
	eachStoreEntry(t, s, "fsck", func(p string, de vfs.DirEntry, a vfs.Attr) {
		if a.Ino != de.Ino || a.Kind != de.Kind {
			t.Errorf("fsck: %s lists as inode %d (%v) and resolves to %d (%v)", p, de.Ino, de.Kind, a.Ino, a.Kind)
		}
		if a.Kind == vfs.KindFile {
			names[a.Ino]++
			nlink[a.Ino] = a.Nlink
			m, err := s.Manifest(ctx, p)
			if err != nil {
				t.Errorf("fsck: manifest of %s: %v", p, err)
			} else if m.Size() != a.Size {
				t.Errorf("fsck: %s has size %d, its manifest %d", p, a.Size, m.Size())
			}
		}
	})
	for ino, n := range names {
		if nlink[ino] != uint32(n) {
			t.Errorf("fsck: inode %d has nlink %d and %d names", ino, nlink[ino], n)
		}
	}
}

// pullStore pulls src's whole change feed into a new in-memory store
// with the real pull (a syncwire driver over an in-process session), ignoring
// nothing.
func pullStore(t *testing.T, src *vfs.Store) *vfs.Store {
	t.Helper()
	ctx := context.Background()
	dst, err := vfs.Open(ctx, vfs.Memory, vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	srv := syncwire.NewServer(src, rpc.ServerOptions{})
	c := rpc.NewClient(rpc.ClientOptions{Config: rpc.Config{ID: dst.ID()}, Dial: func(context.Context) (rpc.Conn, error) {
		client, _ := srv.Pipe()
		return client, nil
	}})
	t.Cleanup(func() { c.Close(); srv.Close() })
	if _, err := syncwire.NewDriver(dst, "container", c, syncwire.DriverOptions{Ignore: []string{}}).PullOnce(ctx); err != nil {
		t.Fatalf("pull: %v", err)
	}
	return dst
}

// The worker.

type pfile struct {
	id   int
	data []byte
}

type stressWorker struct {
	root    string // the mount
	w       int
	rng     *rand.Rand
	log     *bufio.Writer
	files   map[string]*pfile // private names
	dirs    map[string]bool   // private directories
	nextID  int
	region  []byte
	version int
	seq     int
	recent  []string
	counts  map[string]int
}

// helperStress runs args: MOUNT WORKER SEED OPS LOGFILE, and prints its
// private model as JSON on its last line.
func helperStress(args []string) error {
	w, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	ops, _ := strconv.Atoi(args[3])
	lf, err := os.Create(args[4])
	if err != nil {
		return err
	}
	defer lf.Close()
	x := &stressWorker{root: args[0], w: w, rng: rand.New(rand.NewPCG(seed, uint64(w))), log: bufio.NewWriter(lf),
		files: map[string]*pfile{}, dirs: map[string]bool{}, counts: map[string]int{}}
	home := fmt.Sprintf("p%d", w)
	if err := os.Mkdir(x.abs(home), 0o755); err != nil {
		return err
	}
	x.dirs[home] = true
	for i := 1; i <= ops; i++ {
		if err := x.step(); err != nil {
			x.log.Flush()
			return fmt.Errorf("worker %d op %d: %w\nlast ops:\n%s", w, i, err, strings.Join(x.recent, "\n"))
		}
	}
	if err := x.verifyAll(); err != nil {
		return fmt.Errorf("worker %d at the end: %w", w, err)
	}
	if err := x.log.Flush(); err != nil {
		return err
	}
	var res stressResult
	res.Private = map[string]struct {
		Kind  string
		Sha   string
		Group int
	}{}
	for p := range x.dirs {
		res.Private[p] = struct {
			Kind  string
			Sha   string
			Group int
		}{Kind: "dir"}
	}
	for p, f := range x.files {
		res.Private[p] = struct {
			Kind  string
			Sha   string
			Group int
		}{Kind: "file", Sha: sha(f.data), Group: f.id}
	}
	res.Region = x.region
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	var kinds []string
	for k, n := range x.counts {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kinds)
	fmt.Printf("worker %d: %s\n%s\n", w, strings.Join(kinds, " "), b)
	return nil
}

func (x *stressWorker) abs(p string) string { return filepath.Join(x.root, p) }

// done logs a successful operation.
func (x *stressWorker) done(kind, format string, args ...any) {
	line := kind + " " + fmt.Sprintf(format, args...)
	x.counts[kind]++
	fmt.Fprintln(x.log, line)
	if len(x.recent) == 30 {
		x.recent = append(x.recent[:0], x.recent[1:]...)
	}
	x.recent = append(x.recent, line)
}

func (x *stressWorker) pickFile() (string, bool) {
	if len(x.files) == 0 {
		return "", false
	}
	names := make([]string, 0, len(x.files))
	for p := range x.files {
		names = append(names, p)
	}
	slices.Sort(names)
	return names[x.rng.IntN(len(names))], true
}

func (x *stressWorker) pickDir() string {
	names := make([]string, 0, len(x.dirs))
	for p := range x.dirs {
		names = append(names, p)
	}
	slices.Sort(names)
	return names[x.rng.IntN(len(names))]
}

// newName is a fresh private name in a random private directory.
func (x *stressWorker) newName(prefix string) string {
	x.nextID++
	return path.Join(x.pickDir(), fmt.Sprintf("%s%d", prefix, x.nextID))
}

func (x *stressWorker) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(x.rng.Uint32())
	}
	return b
}

func (x *stressWorker) size() int {
	if x.rng.IntN(15) == 0 {
		return x.rng.IntN(1100 << 10)
	}
	return x.rng.IntN(16 << 10)
}

func (x *stressWorker) step() error {
	switch r := x.rng.IntN(100); {
	case r < 12:
		return x.create()
	case r < 24:
		return x.write()
	case r < 32:
		return x.appendPrivate()
	case r < 37:
		return x.truncate()
	case r < 45:
		return x.rename()
	case r < 50:
		return x.unlink()
	case r < 54:
		return x.mkdir()
	case r < 58:
		return x.rmdir()
	case r < 63:
		return x.link()
	case r < 68:
		return x.verifyOne()
	case r < 78:
		return x.publish()
	case r < 82:
		return x.appendLog()
	case r < 88:
		return x.writeBlock()
	default:
		return x.sharedOp()
	}
}

func (x *stressWorker) create() error {
	p := x.newName("f")
	b := x.bytes(x.size())
	if err := os.WriteFile(x.abs(p), b, 0o644); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	x.nextID++
	x.files[p] = &pfile{id: x.nextID, data: b}
	x.done("create", "%s %d", p, len(b))
	return nil
}

func (x *stressWorker) write() error {
	p, ok := x.pickFile()
	if !ok {
		return x.create()
	}
	f := x.files[p]
	off := x.rng.IntN(len(f.data) + 64<<10)
	b := x.bytes(1 + x.rng.IntN(64<<10))
	if err := x.writeTo(p, 0, "write", func(fd *os.File) error {
		_, err := fd.WriteAt(b, int64(off))
		return err
	}); err != nil {
		return err
	}
	if end := off + len(b); end > len(f.data) {
		f.data = append(f.data, make([]byte, end-len(f.data))...)
	}
	copy(f.data[off:], b)
	x.done("write", "%s %d+%d", p, off, len(b))
	return nil
}

func (x *stressWorker) appendPrivate() error {
	p, ok := x.pickFile()
	if !ok {
		return x.create()
	}
	f := x.files[p]
	b := x.bytes(1 + x.rng.IntN(8<<10))
	if err := x.writeTo(p, os.O_APPEND, "append", func(fd *os.File) error {
		_, err := fd.Write(b)
		return err
	}); err != nil {
		return err
	}
	f.data = append(f.data, b...)
	x.done("append", "%s %d", p, len(b))
	return nil
}

// writeTo opens the private file p write-only (and flag), writes to it
// with w and closes it; op names w's write in its error.
func (x *stressWorker) writeTo(p string, flag int, op string, w func(*os.File) error) error {
	fd, err := os.OpenFile(x.abs(p), os.O_WRONLY|flag, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, err)
	}
	if err := w(fd); err != nil {
		fd.Close()
		return fmt.Errorf("%s %s: %w", op, p, err)
	}
	if err := fd.Close(); err != nil {
		return fmt.Errorf("close %s: %w", p, err)
	}
	return nil
}

func (x *stressWorker) truncate() error {
	p, ok := x.pickFile()
	if !ok {
		return x.create()
	}
	f := x.files[p]
	var n int
	switch x.rng.IntN(8) {
	case 0, 1:
		n = 0
	case 2:
		n = x.rng.IntN(len(f.data) + 600<<10) // past a chunk boundary, leaving a hole
	default:
		n = x.rng.IntN(len(f.data) + 16<<10)
	}
	if err := os.Truncate(x.abs(p), int64(n)); err != nil {
		return fmt.Errorf("truncate %s: %w", p, err)
	}
	if n <= len(f.data) {
		f.data = f.data[:n]
	} else {
		f.data = append(f.data, make([]byte, n-len(f.data))...)
	}
	x.done("truncate", "%s %d", p, n)
	return nil
}

// rename moves a file to a new name or over another file, or a directory
// to a new name.
func (x *stressWorker) rename() error {
	if x.rng.IntN(4) == 0 && len(x.dirs) > 1 {
		from := x.pickDir()
		if !strings.Contains(from, "/") {
			return nil // the worker's home stays
		}
		to := x.newName("d")
		if to == from || strings.HasPrefix(to, from+"/") {
			return nil
		}
		if err := os.Rename(x.abs(from), x.abs(to)); err != nil {
			return fmt.Errorf("rename dir %s -> %s: %w", from, to, err)
		}
		for p := range x.dirs {
			if p == from || strings.HasPrefix(p, from+"/") {
				delete(x.dirs, p)
				x.dirs[to+strings.TrimPrefix(p, from)] = true
			}
		}
		moved := map[string]*pfile{}
		for p, f := range x.files {
			if strings.HasPrefix(p, from+"/") {
				delete(x.files, p)
				moved[to+strings.TrimPrefix(p, from)] = f
			}
		}
		maps.Copy(x.files, moved)
		x.done("rename-dir", "%s %s", from, to)
		return nil
	}
	from, ok := x.pickFile()
	if !ok {
		return x.create()
	}
	to := x.newName("f")
	if x.rng.IntN(3) == 0 {
		to, _ = x.pickFile() // over an existing file (perhaps itself or a hardlink of it)
	}
	if err := os.Rename(x.abs(from), x.abs(to)); err != nil {
		return fmt.Errorf("rename %s -> %s: %w", from, to, err)
	}
	if x.files[from] != x.files[to] { // renaming onto a link of the same file does nothing
		f := x.files[from]
		delete(x.files, from)
		x.files[to] = f
	}
	x.done("rename", "%s %s", from, to)
	return nil
}

func (x *stressWorker) unlink() error {
	p, ok := x.pickFile()
	if !ok {
		return nil
	}
	if err := os.Remove(x.abs(p)); err != nil {
		return fmt.Errorf("unlink %s: %w", p, err)
	}
	delete(x.files, p)
	x.done("unlink", "%s", p)
	return nil
}

func (x *stressWorker) mkdir() error {
	p := x.newName("d")
	if strings.Count(p, "/") > 3 {
		return nil
	}
	if err := os.Mkdir(x.abs(p), 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", p, err)
	}
	x.dirs[p] = true
	x.done("mkdir", "%s", p)
	return nil
}

func (x *stressWorker) rmdir() error {
	p := x.pickDir()
	if !strings.Contains(p, "/") {
		return nil
	}
	empty := true
	for q := range x.files {
		empty = empty && !strings.HasPrefix(q, p+"/")
	}
	for q := range x.dirs {
		empty = empty && !strings.HasPrefix(q, p+"/")
	}
	err := syscall.Rmdir(x.abs(p))
	if !empty {
		if err != syscall.ENOTEMPTY && err != syscall.EEXIST {
			return fmt.Errorf("rmdir of non-empty %s: %v, want ENOTEMPTY", p, err)
		}
		x.done("rmdir-refused", "%s", p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("rmdir %s: %w", p, err)
	}
	delete(x.dirs, p)
	x.done("rmdir", "%s", p)
	return nil
}

func (x *stressWorker) link() error {
	from, ok := x.pickFile()
	if !ok {
		return x.create()
	}
	to := x.newName("l")
	if err := os.Link(x.abs(from), x.abs(to)); err != nil {
		return fmt.Errorf("link %s -> %s: %w", from, to, err)
	}
	x.files[to] = x.files[from]
	x.done("link", "%s %s", from, to)
	return nil
}

func (x *stressWorker) verifyOne() error {
	p, ok := x.pickFile()
	if !ok {
		return nil
	}
	b, err := os.ReadFile(x.abs(p))
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if want := x.files[p].data; !bytes.Equal(b, want) {
		return fmt.Errorf("read %s: %d bytes differing from the model's %d at %d", p, len(b), len(want), firstDiff(b, want))
	}
	x.done("verify", "%s", p)
	return nil
}

func (x *stressWorker) verifyAll() error {
	for p := range x.files {
		b, err := os.ReadFile(x.abs(p))
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if want := x.files[p].data; !bytes.Equal(b, want) {
			return fmt.Errorf("read %s: %d bytes differing from the model's %d at %d", p, len(b), len(want), firstDiff(b, want))
		}
	}
	return nil
}

// sharedName is a name in the shared directories, perhaps in a
// subdirectory some worker may have made (or removed).
func (x *stressWorker) sharedName() string {
	dir := fmt.Sprintf("shared/s%d", x.rng.IntN(stressSharedDirs))
	if x.rng.IntN(3) == 0 {
		dir += fmt.Sprintf("/d%d", x.rng.IntN(2))
	}
	return fmt.Sprintf("%s/n%d", dir, x.rng.IntN(stressSharedNames))
}

// expected reports whether err is an outcome another worker's operations
// can cause on a shared name.
func expected(err error) bool {
	for _, e := range []error{syscall.ENOENT, syscall.EEXIST, syscall.ENOTEMPTY, syscall.EISDIR, syscall.ENOTDIR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// publish writes a version to a private temporary file and renames it
// over a shared name.
func (x *stressWorker) publish() error {
	x.version++
	v := x.version
	b := stressVersion(x.w, v)
	tmp := fmt.Sprintf("p%d/.tmp%d", x.w, v)
	if err := os.WriteFile(x.abs(tmp), b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	to := x.sharedName()
	if err := os.Rename(x.abs(tmp), x.abs(to)); err != nil {
		if !expected(err) {
			return fmt.Errorf("rename %s -> %s: %w", tmp, to, err)
		}
		if err := os.Remove(x.abs(tmp)); err != nil {
			return fmt.Errorf("remove %s: %w", tmp, err)
		}
		x.done("publish-refused", "%s %d.%d", to, x.w, v)
		return nil
	}
	x.done("publish", "%s %d.%d", to, x.w, v)
	return nil
}

// writeBlock writes part of the worker's region of the blocks file while
// other workers write theirs, and reads the whole region back.
func (x *stressWorker) writeBlock() error {
	off := x.rng.IntN(stressRegion)
	b := x.bytes(1 + x.rng.IntN(min(stressRegion-off, 128<<10)))
	base := int64(x.w * stressRegion)
	fd, err := os.OpenFile(x.abs(stressBlocks), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open the blocks: %w", err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(b, base+int64(off)); err != nil {
		return fmt.Errorf("write the blocks %d+%d: %w", base+int64(off), len(b), err)
	}
	if end := off + len(b); end > len(x.region) {
		x.region = append(x.region, make([]byte, end-len(x.region))...)
	}
	copy(x.region[off:], b)
	if x.rng.IntN(4) == 0 {
		if err := fd.Sync(); err != nil {
			return fmt.Errorf("fsync the blocks: %w", err)
		}
	}
	got := make([]byte, len(x.region))
	if _, err := fd.ReadAt(got, base); err != nil {
		return fmt.Errorf("read the blocks back: %w", err)
	}
	if i := firstDiff(got, x.region); i >= 0 {
		return fmt.Errorf("the blocks read back: region offset %d is %#x, written %#x", i, got[i], x.region[i])
	}
	if err := fd.Close(); err != nil {
		return fmt.Errorf("close the blocks: %w", err)
	}
	x.done("block", "%d+%d", off, len(b))
	return nil
}

// appendLog appends one whole record to the shared log with O_APPEND.
func (x *stressWorker) appendLog() error {
	x.seq++
	id := fmt.Sprintf("%d.%d", x.w, x.seq)
	fd, err := os.OpenFile(x.abs(stressLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open the log: %w", err)
	}
	if _, err := fd.Write([]byte(stressRecord(id))); err != nil {
		fd.Close()
		return fmt.Errorf("append to the log: %w", err)
	}
	if err := fd.Close(); err != nil {
		return fmt.Errorf("close the log: %w", err)
	}
	x.done("append-log", "%s", id)
	return nil
}

// sharedOp renames, links, unlinks, makes or removes shared names; other
// workers' operations may make it fail in the expected ways.
func (x *stressWorker) sharedOp() error {
	var err error
	var what string
	switch x.rng.IntN(6) {
	case 0, 1:
		a, b := x.sharedName(), x.sharedName()
		what, err = "rename "+a+" "+b, os.Rename(x.abs(a), x.abs(b))
	case 2:
		a, b := x.sharedName(), x.sharedName()
		what, err = "link "+a+" "+b, os.Link(x.abs(a), x.abs(b))
	case 3:
		a := x.sharedName()
		what, err = "unlink "+a, syscall.Unlink(x.abs(a))
	case 4:
		d := fmt.Sprintf("shared/s%d/d%d", x.rng.IntN(stressSharedDirs), x.rng.IntN(2))
		what, err = "mkdir "+d, syscall.Mkdir(x.abs(d), 0o755)
	default:
		d := fmt.Sprintf("shared/s%d/d%d", x.rng.IntN(stressSharedDirs), x.rng.IntN(2))
		what, err = "rmdir "+d, syscall.Rmdir(x.abs(d))
	}
	if err != nil {
		if !expected(err) {
			return fmt.Errorf("shared %s: %w", what, err)
		}
		x.done("shared-refused", "%s: %v", what, err)
		return nil
	}
	x.done("shared", "%s", what)
	return nil
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// firstDiff is the first offset where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
