package fusefs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

func TestToErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{vfs.ErrNotExist, syscall.ENOENT},
		{fmt.Errorf("lookup a: %w", vfs.ErrExist), syscall.EEXIST},
		{&vfs.PathError{Op: "rmdir", Path: "d", Err: vfs.ErrNotEmpty}, syscall.ENOTEMPTY},
		{fmt.Errorf("x: %w", syscall.EROFS), syscall.EROFS},
		{context.Canceled, syscall.EINTR},
		{errors.New("disk on fire"), syscall.EIO},
		{errors.Join(vfs.ErrNotExist, errors.New("release")), syscall.ENOENT},
	} {
		if got := toErrno(tc.err); got != tc.want {
			t.Errorf("toErrno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestNewNodeAttr(t *testing.T) {
	user := fuse.Caller{Owner: fuse.Owner{Uid: 1000, Gid: 1000}}
	plain := vfs.Attr{Mode: 0o755, Uid: 0, Gid: 0}
	sgid := vfs.Attr{Mode: 0o2775, Uid: 0, Gid: 50}
	for _, tc := range []struct {
		name   string
		parent vfs.Attr
		c      fuse.Caller
		mode   uint32
		dir    bool
		want   vfs.NewAttr
	}{
		{"file by user", plain, user, 0o644, false, vfs.NewAttr{Mode: 0o644, Uid: 1000, Gid: 1000}},
		{"type bits dropped", plain, user, syscall.S_IFREG | 0o600, false, vfs.NewAttr{Mode: 0o600, Uid: 1000, Gid: 1000}},
		{"file in setgid dir", sgid, user, 0o644, false, vfs.NewAttr{Mode: 0o644, Uid: 1000, Gid: 50}},
		{"dir in setgid dir stays setgid", sgid, user, 0o755, true, vfs.NewAttr{Mode: 0o2755, Uid: 1000, Gid: 50}},
		{"setgid file by a non-member", sgid, user, 0o2755, false, vfs.NewAttr{Mode: 0o755, Uid: 1000, Gid: 50}},
		{"setgid file by root", sgid, fuse.Caller{}, 0o2755, false, vfs.NewAttr{Mode: 0o2755, Uid: 0, Gid: 50}},
	} {
		if got := newNodeAttr(tc.parent, tc.c, tc.mode, tc.dir); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCheckSetattr(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	now := time.Now()
	file := vfs.Attr{Mode: 0o6755, Uid: 1000, Gid: 1000}
	owner := fuse.Caller{Owner: fuse.Owner{Uid: 1000, Gid: 1000}}
	other := fuse.Caller{Owner: fuse.Owner{Uid: 1001, Gid: 1001}}
	root := fuse.Caller{}
	for _, tc := range []struct {
		name string
		c    fuse.Caller
		r    setattrRequest
		ok   bool
	}{
		{"owner chmod", owner, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o600)}}, true},
		{"other chmod", other, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o777)}}, false},
		{"other strips setuid", other, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o2755)}}, true},
		{"other strips both", other, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o755)}}, true},
		{"other strips and adds", other, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o777)}}, false},
		{"root chmod", root, setattrRequest{sa: vfs.SetAttr{Mode: u32(0o1)}}, true},
		{"owner chown away", owner, setattrRequest{sa: vfs.SetAttr{Uid: u32(0)}}, false},
		{"owner chown to self", owner, setattrRequest{sa: vfs.SetAttr{Uid: u32(1000)}}, true},
		{"owner chgrp", owner, setattrRequest{sa: vfs.SetAttr{Gid: u32(20)}}, true},
		{"other chgrp", other, setattrRequest{sa: vfs.SetAttr{Gid: u32(1001)}}, false},
		{"root chown", root, setattrRequest{sa: vfs.SetAttr{Uid: u32(5), Gid: u32(5)}}, true},
		{"other touch now", other, setattrRequest{sa: vfs.SetAttr{Mtime: &now}}, true},
		{"other touch -d", other, setattrRequest{sa: vfs.SetAttr{Mtime: &now}, explicit: true}, false},
		{"owner touch -d", owner, setattrRequest{sa: vfs.SetAttr{Mtime: &now}, explicit: true}, true},
	} {
		err := checkSetattr(tc.c, file, tc.r)
		if got := err == nil; got != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && toErrno(err) != syscall.EPERM {
			t.Errorf("%s: errno %v, want EPERM", tc.name, toErrno(err))
		}
	}
}

// fakeNotifier records notifications, optionally blocking the first one.
type fakeNotifier struct {
	mu      sync.Mutex
	entries []entryKey
	inodes  []uint64
	gate    chan struct{}
}

func (f *fakeNotifier) EntryNotify(parent uint64, name string) fuse.Status {
	f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, entryKey{vfs.Ino(parent), name})
	return fuse.OK
}

func (f *fakeNotifier) InodeNotify(node uint64, off, length int64) fuse.Status {
	f.wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inodes = append(f.inodes, node)
	return fuse.ENOENT
}

// sent is a copy of the notifications so far.
func (f *fakeNotifier) sent() ([]entryKey, []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries), slices.Clone(f.inodes)
}

func (f *fakeNotifier) wait() {
	if f.gate != nil {
		<-f.gate
	}
}

func TestInvalidatorCoalescesAndWaits(t *testing.T) {
	fn := &fakeNotifier{gate: make(chan struct{})}
	v := newInvalidator(fn, nil, 100, &metrics{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	v.enqueue([]vfs.Invalidation{{Ino: 5, Parent: 1, Name: "a"}})
	v.enqueue([]vfs.Invalidation{{Ino: 5, Parent: 1, Name: "a"}, {Ino: 6}})
	v.enqueue([]vfs.Invalidation{{Ino: 5, Parent: 1, Name: "a"}})

	short, stop := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer stop()
	if err := v.wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait returned %v while delivery is blocked", err)
	}
	close(fn.gate)
	if err := v.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	// The first batch may have been taken before the others arrived, so
	// each item is delivered once or twice, never more.
	count := map[uint64]int{}
	for _, ino := range fn.inodes {
		count[ino]++
	}
	if count[5] < 1 || count[5] > 2 || count[6] != 1 || count[1] < 1 || count[1] > 2 {
		t.Errorf("inode notifications %v", fn.inodes)
	}
	if len(fn.entries) < 1 || len(fn.entries) > 2 || fn.entries[0] != (entryKey{1, "a"}) {
		t.Errorf("entry notifications %v", fn.entries)
	}
}

// TestInvalidatorSkipsWhatTheCommitMade: a node the commit made, and the
// entries in a directory it made, cannot be in the kernel's caches; the
// entry of the new subtree's top in an older directory (perhaps a
// negative one) and that directory's attributes can, and so can a node
// the commit only changed.
func TestInvalidatorSkipsWhatTheCommitMade(t *testing.T) {
	fn := &fakeNotifier{}
	v := newInvalidator(fn, nil, 100, &metrics{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	v.enqueue([]vfs.Invalidation{
		{Ino: 10, Parent: 1, Name: "d", New: true},
		{Ino: 11, Parent: 10, Name: "f", New: true},
		{Ino: 12, Parent: 10, Name: "e", New: true},
		{Ino: 13, Parent: 12, Name: "g", New: true},
		{Ino: 12}, // its mode set later in the same commit
		{Ino: 5, Parent: 3, Name: "changed"},
		{Ino: 14, Parent: 3, Name: "added", New: true},
	})
	if err := v.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, inodes := fn.sent()
	slices.Sort(inodes)
	if want := []uint64{1, 3, 5}; !slices.Equal(inodes, want) {
		t.Errorf("inode notifications %v, want %v", inodes, want)
	}
	slices.SortFunc(entries, func(a, b entryKey) int {
		return cmp.Or(cmp.Compare(a.parent, b.parent), strings.Compare(a.name, b.name))
	})
	if want := []entryKey{{1, "d"}, {3, "added"}, {3, "changed"}}; !slices.Equal(entries, want) {
		t.Errorf("entry notifications %v, want %v", entries, want)
	}
	// The next commit's entries in the directory the first one made are
	// invalidated: the kernel may hold them (a negative entry) by now.
	v.enqueue([]vfs.Invalidation{{Ino: 15, Parent: 10, Name: "later", New: true}})
	if err := v.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := fn.sent(); entries[len(entries)-1] != (entryKey{10, "later"}) {
		t.Errorf("last entry notification %v, want {10 later}", entries[len(entries)-1])
	}
}

// TestInvalidatorSweepsAfterALoss: when mutations answered to the kernel
// were lost (vfs.Invalidation.All), what is pending gives way to one sweep
// of everything the kernel may hold.
func TestInvalidatorSweepsAfterALoss(t *testing.T) {
	v := newInvalidator(&fakeNotifier{}, nil, 100, &metrics{}, slog.New(slog.DiscardHandler))
	v.enqueue([]vfs.Invalidation{{Ino: 5, Parent: 1, Name: "a"}})
	v.enqueue([]vfs.Invalidation{{All: true}})
	v.enqueue([]vfs.Invalidation{{Ino: 6, Parent: 1, Name: "b"}})
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.sweep || len(v.entries) != 0 || len(v.inodes) != 0 {
		t.Errorf("after a loss: sweep %v, %d entries and %d inodes pending; want a sweep alone", v.sweep, len(v.entries), len(v.inodes))
	}
}

func TestInvalidatorStopsAndDropsLateWork(t *testing.T) {
	v := newInvalidator(&fakeNotifier{}, nil, 100, &metrics{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.run(ctx); close(done) }()
	cancel()
	<-done
	v.enqueue([]vfs.Invalidation{{Ino: 9}}) // after unmount: ignored, never blocks
	if err := v.wait(context.Background()); err != nil {
		t.Errorf("wait after stop: %v", err)
	}
}

// A READ's bytes go to the kernel as a vector, in the reply's one writev:
// go-fuse first tries to splice any result that is not one (the header
// written into a pipe, then drained: two wasted system calls a READ, 5.6%
// of computerd's CPU in a cold read of node_modules).
func TestReadRepliesWithAVector(t *testing.T) {
	ctx := context.Background()
	store, err := vfs.Open(ctx, t.TempDir()+"/state.db", vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	want := []byte("bytes a READ returns")
	a, err := store.WriteFile(ctx, "f", want, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.OpenHandle(ctx, a.Ino)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	fh := &fileHandle{srv: &Server{metrics: &metrics{}}, h: h}
	res, errno := fh.Read(ctx, make([]byte, 4096), 0)
	if errno != 0 {
		t.Fatalf("read: %v", errno)
	}
	// go-fuse writes a result with Slices (its withSlice) by writev alone.
	vec, ok := res.(interface {
		Slices() ([][]byte, fuse.Status)
	})
	if !ok {
		t.Fatalf("read returned %T, which go-fuse tries to splice first", res)
	}
	parts, st := vec.Slices()
	if !st.Ok() || len(parts) != 1 || string(parts[0]) != string(want) {
		t.Fatalf("read returned %q (%v), want %q", parts, st, want)
	}
}
