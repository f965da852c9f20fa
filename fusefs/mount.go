package fusefs

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/vfs"
)

// Defaults for Options.
const (
	DefaultEntryTimeout = time.Second
	DefaultAttrTimeout  = time.Second
	// DefaultMaxWrite is the largest WRITE (and READ) the kernel sends us:
	// one request carries two chunks of a sequential write, so a 1 GiB dd
	// costs 1024 round trips instead of 8192 at go-fuse's 128 KiB.
	DefaultMaxWrite = 1 << 20
	// DefaultMaxReadAhead is asked of the kernel, and set as the mount's
	// read-ahead (its bdi's read_ahead_kb, 128 KiB by default, which caps
	// what the INIT reply asks): a sequential read then comes in READs of
	// up to 1 MiB, not 128 KiB (setReadAhead).
	DefaultMaxReadAhead = 1 << 20
	// DefaultInvalidationQueue bounds the pending (coalesced) invalidations;
	// past it the queue collapses into one sweep of everything the kernel
	// may cache.
	DefaultInvalidationQueue = 1 << 16
	// DefaultFsName is what mount(8) and df(1) show in the first column, and
	// the subtype ("fuse.wsync").
	DefaultFsName = "wsync"
)

// Owner is a uid/gid pair.
type Owner struct {
	Uid, Gid uint32
}

// Options configures Mount. The zero value is usable.
type Options struct {
	// Owner, when set, is reported as the owner of the mount root whatever
	// the store recorded (computerd passes --owner here and to
	// vfs.Options.Owner, which owns the nodes Apply creates). A chown of the
	// root through the mount updates both.
	Owner *Owner

	// EntryTimeout and AttrTimeout are how long the kernel may cache a
	// directory entry and a node's attributes. 0 means the default (1s);
	// a negative value disables that cache. Upstream applies invalidate
	// explicitly, so long timeouts are safe.
	EntryTimeout time.Duration
	AttrTimeout  time.Duration
	// NegativeTimeout caches failed lookups (0: the entry timeout; negative:
	// not cached). Applies invalidate the names they create, so negative
	// entries are as safe as positive ones, and compilers, git and shells
	// probe many missing names.
	NegativeTimeout time.Duration

	// MaxWrite and MaxReadAhead bound request sizes (0: the defaults).
	MaxWrite     int
	MaxReadAhead int

	// InvalidationQueue bounds pending invalidations (0: the default).
	InvalidationQueue int

	// FsName is the source shown by mount(8) and df(1) (default "wsync").
	FsName string

	// Debug logs every FUSE request and reply (very verbose) to Logger.
	Debug bool
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

func (o Options) timeout(d, def time.Duration) *time.Duration {
	switch {
	case d == 0:
		d = def
	case d < 0:
		d = 0
	}
	return &d
}

// Server is a mounted store. Its methods are safe for concurrent use.
type Server struct {
	store   *vfs.Store
	opts    Options
	dir     string
	log     *slog.Logger
	metrics *metrics
	root    *Node
	fuse    *fuse.Server
	inval   *invalidator

	mu      sync.Mutex
	handles map[*fileHandle]struct{}
	// rootOwner overrides the root's uid/gid when Options.Owner is set.
	rootOwner *Owner

	dev       uint64 // the mount's device, for aborting the connection
	stopInval context.CancelFunc
	invalDone chan struct{}
	closeOnce sync.Once
	unmounted bool
}

// Mount mounts store at dir and serves it until Unmount. ctx bounds the
// setup only. The mount is shared by every user of the machine (allow_other)
// and the kernel checks permissions from the attributes we report
// (default_permissions).
func Mount(ctx context.Context, dir string, store *vfs.Store, opts Options) (*Server, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("mount %s: %w: %v", dir, ErrNoFUSE, err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "fusefs", "mount", dir)
	if opts.FsName == "" {
		opts.FsName = DefaultFsName
	}
	if opts.MaxWrite == 0 {
		opts.MaxWrite = DefaultMaxWrite
	}
	if opts.MaxReadAhead == 0 {
		opts.MaxReadAhead = DefaultMaxReadAhead
	}
	if opts.InvalidationQueue <= 0 {
		opts.InvalidationQueue = DefaultInvalidationQueue
	}

	// Fail early, with a store error rather than a kernel one, when the store
	// cannot even give its root.
	if _, err := store.GetAttr(ctx, vfs.RootIno); err != nil {
		return nil, fmt.Errorf("mount %s: root: %w", dir, err)
	}

	s := &Server{
		store:   store,
		opts:    opts,
		dir:     dir,
		log:     logger,
		metrics: &metrics{},
		handles: make(map[*fileHandle]struct{}),
	}
	if opts.Owner != nil {
		o := *opts.Owner
		s.rootOwner = &o
	}
	s.root = &Node{srv: s, ino: vfs.RootIno}

	debugLog := log.New(io.Discard, "", 0)
	if opts.Debug {
		debugLog = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	}
	fopts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther: true,
			// The kernel does the permission checks (including the setgid
			// clearing of chmod by a non-member) from our attributes.
			// nodev: device nodes can be made (they are local, like FIFOs
			// and sockets) but not opened, whoever asks. go-fuse's direct
			// mount sets it already; naming it keeps it on fusermount3's.
			Options:      []string{"default_permissions", "nodev"},
			FsName:       opts.FsName,
			Name:         DefaultFsName,
			DirectMount:  true, // we run as root; falls back to fusermount3
			MaxWrite:     opts.MaxWrite,
			MaxReadAhead: opts.MaxReadAhead,
			// Readahead and writeback of mmap'ed pages are background
			// requests; the default of 12 throttles sequential reads.
			MaxBackground: 64,
			// Only user.* xattrs exist here; answer the kernel's
			// security.capability probes without a trip into the store.
			IgnoreSecurityLabels: true,
			// Locks stay in the kernel: flock(2) and fcntl(2) locks work
			// between the processes of this machine without us.
			EnableLocks: false,
			Debug:       opts.Debug,
			Logger:      debugLog,
		},
		EntryTimeout:    opts.timeout(opts.EntryTimeout, DefaultEntryTimeout),
		AttrTimeout:     opts.timeout(opts.AttrTimeout, DefaultAttrTimeout),
		NullPermissions: true, // mode 000 is a mode, not "unset"
		RootStableAttr:  &fs.StableAttr{Ino: uint64(vfs.RootIno), Gen: nodeGen},
		// The FUSE node id is the vfs inode number, so an invalidation
		// names the kernel's node directly, whether or not go-fuse still
		// holds an Inode for it.
		ExternalNodeID: true,
		Logger:         debugLog,
	}
	if opts.NegativeTimeout >= 0 {
		fopts.NegativeTimeout = opts.timeout(opts.NegativeTimeout, *fopts.EntryTimeout)
	}

	rawFS := fs.NewNodeFS(s.root, fopts)
	srv, err := fuse.NewServer(rawFS, dir, &fopts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	s.fuse = srv
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil {
		s.dev = st.Dev
		setReadAhead(st.Dev, opts.MaxReadAhead, logger)
	}

	s.inval = newInvalidator(srv, s.root.EmbeddedInode(), opts.InvalidationQueue, s.metrics, logger)
	ictx, cancel := context.WithCancel(context.Background())
	s.stopInval = cancel
	s.invalDone = make(chan struct{})
	go func() {
		defer close(s.invalDone)
		s.inval.run(ictx)
	}()
	store.Observe(s.inval.enqueue)
	live.Store(s, struct{}{})
	logger.Info("mounted", "fsname", opts.FsName)
	return s, nil
}

// setReadAhead sets the read-ahead of the mount whose device is dev to
// bytes: /sys/class/bdi/MAJOR:MINOR/read_ahead_kb. The kernel keeps a FUSE
// mount's read-ahead at the smaller of that (128 KiB unless set) and what
// the INIT reply asks, so without it a sequential read of a large file
// comes in READs of 128 KiB, eight times the round trips of 1 MiB ones.
// Best effort: where sysfs is read-only (many containers) the mount keeps
// the kernel's default, and says so at debug level.
func setReadAhead(dev uint64, bytes int, log *slog.Logger) {
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	if err := os.WriteFile(p, []byte(strconv.Itoa(bytes>>10)), 0); err != nil {
		log.Debug("read-ahead left at the kernel's default", "path", p, "err", err)
	}
}

// nodeGen is every node's generation: vfs never reuses an inode number
// within a store, so one generation serves the mount's lifetime.
const nodeGen = 1

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// Store is the store being served.
func (s *Server) Store() *vfs.Store { return s.store }

// WaitInvalidated blocks until every invalidation observed before the call
// has been delivered to the kernel. A sync driver calls it after an upstream
// apply and before it lets a command run, so the command sees the new bytes
// without waiting for any cache timeout.
func (s *Server) WaitInvalidated(ctx context.Context) error {
	return s.inval.wait(ctx)
}

// Wait blocks until the file system is unmounted (by Unmount or from outside).
func (s *Server) Wait() { s.fuse.Wait() }

// Unmount unmounts cleanly: it fails (EBUSY) while a process still uses the
// mount, and then the mount keeps working. On success every handle the
// kernel still held is committed and the invalidation goroutine stopped.
func (s *Server) Unmount() error {
	s.mu.Lock()
	done := s.unmounted
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.fuse.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", s.dir, err)
	}
	return s.shutdown()
}

// ForceUnmount detaches the mount even while it is busy (MNT_DETACH) and
// aborts the FUSE connection, so processes still inside get ENOTCONN and the
// serve loop ends. It is the fallback of tests and of a daemon whose clean
// unmount failed at exit.
func (s *Server) ForceUnmount() error {
	s.mu.Lock()
	done := s.unmounted
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("force unmount %s: %w", s.dir, err)
	}
	if s.dev != 0 {
		abortConnection(s.dev)
	}
	served := make(chan struct{})
	go func() { s.fuse.Wait(); close(served) }()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		// Without fusectl the loop runs until the last descriptor into the
		// detached mount closes; stop waiting, the mount is gone already.
		s.log.Warn("serve loop still running after a forced unmount")
	}
	return s.shutdown()
}

// abortConnection writes to fusectl's abort file of the connection whose
// device is dev, mounting fusectl where it is not (systemd mounts it; a
// container often does not); errors are of no use to the caller.
func abortConnection(dev uint64) {
	const ctl = "/sys/fs/fuse/connections"
	minor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
	name := fmt.Sprintf("%s/%d/abort", ctl, minor)
	if _, err := os.Stat(name); err != nil {
		_ = syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	_ = os.WriteFile(name, []byte("1"), 0o200)
}

// shutdown runs once after the kernel let go of the mount.
func (s *Server) shutdown() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.unmounted = true
		s.mu.Unlock()
		live.Delete(s)
		s.stopInval()
		<-s.invalDone
		err = s.releaseAll(context.Background())
		s.log.Info("unmounted")
	})
	return err
}
