package vfs

// API CONTRACT: the exported surface of vfs. The implementation replaces these
// bodies; the signatures are fixed (fusefs, syncwire and workspace code
// against them). Delete this file's bodies as they get implemented.

import (
	"context"
	"iter"
	"log/slog"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// Ino is an inode number. Inode numbers are never reused within a store.
type Ino uint64

// RootIno is the root directory's fixed inode.
const RootIno Ino = 1

// Kind is a node's type.
type Kind uint8

const (
	KindFile Kind = iota + 1
	KindDir
	KindSymlink
)

// Attr is a node's attributes.
type Attr struct {
	Ino   Ino
	Kind  Kind
	Mode  uint32 // permission bits, mode & 07777
	Uid   uint32
	Gid   uint32
	Nlink uint32
	Size  int64
	Mtime time.Time
	Ctime time.Time
	Atime time.Time
	Rev   int64 // the rev of the last mutation that touched the node
}

// DirEntry is one name in a directory.
type DirEntry struct {
	Name string
	Ino  Ino
	Kind Kind
	Mode uint32
}

// Owner is the uid/gid and permission bits a new node gets.
type NewAttr struct {
	Mode uint32 // permission bits
	Uid  uint32
	Gid  uint32
}

// SetAttr changes a node's attributes; nil fields are left alone.
type SetAttr struct {
	Mode  *uint32
	Uid   *uint32
	Gid   *uint32
	Size  *int64 // truncate or extend (files only)
	Atime *time.Time
	Mtime *time.Time
}

// RenameFlags are rename(2)'s flags.
type RenameFlags uint32

const (
	RenameNoReplace RenameFlags = 1 << 0 // RENAME_NOREPLACE
	RenameExchange  RenameFlags = 1 << 1 // RENAME_EXCHANGE: refused with ErrInvalid
)

// StatFS are filesystem figures for statfs(2).
type StatFS struct {
	Blocks, BlocksFree, BlocksAvail uint64 // in units of BlockSize
	Files, FilesFree                uint64
	BlockSize                       uint32
	NameLen                         uint32
}

// Source says who produced the entries handed to Apply.
type Source uint8

const (
	// Upstream: a sync peer's entries (senderRev > 0). Idempotent: an entry
	// that already matches is skipped and stamps no rev.
	Upstream Source = iota + 1
	// Local: an external writer's entries (senderRev == 0), applied as local
	// writes whose revs ship onward on the next sync.
	Local
)

// Options configures Open.
type Options struct {
	// Owner is the uid/gid of nodes created by Apply and of the root.
	Owner NewAttr
	// ChunkDir holds full-size chunk files; default: the database path + ".chunks".
	ChunkDir string
	// InlineMax overrides chunkstore's inline threshold (0: default).
	InlineMax int
	// NoSync: synchronous=OFF and no fsync of chunk files (tests, tmpfs).
	NoSync bool
	Logger *slog.Logger
}

// ApplyOptions configures one Apply batch.
type ApplyOptions struct {
	Source Source
	// Stage holds chunks received for this batch; entries may reference
	// chunks in it or already stored.
	Stage *chunkstore.Stage
	// Peer and Watermarks, when Watermarks is non-nil, are written in the
	// same transaction as the batch.
	Peer       string
	Watermarks *watermark.Set
}

// ApplyResult reports what a batch did.
type ApplyResult struct {
	Applied  int   // entries that changed the store
	Skipped  int   // entries that already matched (idempotent)
	FirstRev int64 // first rev stamped (0 when none)
	LastRev  int64 // last rev stamped (0 when none)
}

// Invalidation names what a committed mutation changed, for kernel caches:
// the node's attributes and content, and the (Parent, Name) entry.
type Invalidation struct {
	Ino    Ino
	Parent Ino    // 0 when no entry changed
	Name   string // the entry's name in Parent
}

// Store is one workspace's VFS.
type Store struct{ _ int }

func Open(ctx context.Context, path string, opts Options) (*Store, error) { panic("contract") }
func (s *Store) Close() error                                             { panic("contract") }
func (s *Store) ID() string                                               { panic("contract") }
func (s *Store) CurrentRev() int64                                        { panic("contract") }
func (s *Store) Chunks() *chunkstore.Store                                { panic("contract") }

// Observe registers fn, called after every commit that Apply made (not local
// FUSE writes), outside every store lock, with the inodes and entries to
// invalidate. fn must not call back into the store synchronously.
func (s *Store) Observe(fn func([]Invalidation)) { panic("contract") }

// By inode (FUSE).
func (s *Store) Lookup(ctx context.Context, parent Ino, name string) (Attr, error) {
	panic("contract")
}
func (s *Store) GetAttr(ctx context.Context, ino Ino) (Attr, error) { panic("contract") }

// ReadDir returns up to limit entries with names > after, in name order.
func (s *Store) ReadDir(ctx context.Context, dir Ino, after string, limit int) ([]DirEntry, error) {
	panic("contract")
}
func (s *Store) Create(ctx context.Context, parent Ino, name string, a NewAttr) (Attr, error) {
	panic("contract")
}
func (s *Store) Mkdir(ctx context.Context, parent Ino, name string, a NewAttr) (Attr, error) {
	panic("contract")
}
func (s *Store) Symlink(ctx context.Context, parent Ino, name, target string, a NewAttr) (Attr, error) {
	panic("contract")
}
func (s *Store) Readlink(ctx context.Context, ino Ino) (string, error) { panic("contract") }
func (s *Store) Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error) {
	panic("contract")
}
func (s *Store) Unlink(ctx context.Context, parent Ino, name string) error { panic("contract") }
func (s *Store) Rmdir(ctx context.Context, parent Ino, name string) error  { panic("contract") }
func (s *Store) Rename(ctx context.Context, parent Ino, name string, newParent Ino, newName string, flags RenameFlags) error {
	panic("contract")
}
func (s *Store) SetAttr(ctx context.Context, ino Ino, sa SetAttr) (Attr, error) { panic("contract") }
func (s *Store) ReadAt(ctx context.Context, ino Ino, p []byte, off int64) (int, error) {
	panic("contract")
}
func (s *Store) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	panic("contract")
}
func (s *Store) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error {
	panic("contract")
}
func (s *Store) ListXattr(ctx context.Context, ino Ino) ([]string, error)    { panic("contract") }
func (s *Store) RemoveXattr(ctx context.Context, ino Ino, name string) error { panic("contract") }
func (s *Store) StatFS(ctx context.Context) (StatFS, error)                  { panic("contract") }

// Open handles. A handle buffers writes; Flush commits them as one rev.
// While a handle is open its node survives unlink (nlink 0) until Release.
func (s *Store) OpenHandle(ctx context.Context, ino Ino) (*Handle, error) { panic("contract") }

type Handle struct{ _ int }

func (h *Handle) Ino() Ino                                                      { panic("contract") }
func (h *Handle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) { panic("contract") }
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error)  { panic("contract") }
func (h *Handle) Truncate(ctx context.Context, size int64) error                { panic("contract") }
func (h *Handle) Size() int64                                                   { panic("contract") }
func (h *Handle) Dirty() bool                                                   { panic("contract") }
func (h *Handle) Flush(ctx context.Context) error                               { panic("contract") }
func (h *Handle) Release(ctx context.Context) error                             { panic("contract") }

// FlushAll commits every dirty open handle (before a feed is answered).
func (s *Store) FlushAll(ctx context.Context) error { panic("contract") }

// By path (server API, tests). Paths are in store form (see ValidatePath);
// "" is the root. Symlinks are never followed except as noted.
func (s *Store) Stat(ctx context.Context, path string) (Attr, error)           { panic("contract") }
func (s *Store) List(ctx context.Context, path string) ([]DirEntry, error)     { panic("contract") }
func (s *Store) ReadFile(ctx context.Context, path string) ([]byte, error)     { panic("contract") }
func (s *Store) ReadLinkPath(ctx context.Context, path string) (string, error) { panic("contract") }

// WriteFile atomically replaces (or creates) the file at path with data.
func (s *Store) WriteFile(ctx context.Context, path string, data []byte, mode uint32) (Attr, error) {
	panic("contract")
}
func (s *Store) MkdirPath(ctx context.Context, path string, mode uint32, parents bool) error {
	panic("contract")
}
func (s *Store) SymlinkPath(ctx context.Context, target, path string) error  { panic("contract") }
func (s *Store) LinkPath(ctx context.Context, oldPath, newPath string) error { panic("contract") }
func (s *Store) RemovePath(ctx context.Context, path string, recursive bool) error {
	panic("contract")
}
func (s *Store) RenamePath(ctx context.Context, oldPath, newPath string) error { panic("contract") }
func (s *Store) ChmodPath(ctx context.Context, path string, mode uint32) error { panic("contract") }
func (s *Store) ResolvePath(ctx context.Context, path string) (Ino, error)     { panic("contract") }

// Sync surface.

// Changes streams the coalesced feed after `after` up to and including
// `through` (a full cursor; use watermark.At(s.CurrentRev()) for "now"),
// ordered by (rev, path), leaving out ignored paths.
func (s *Store) Changes(ctx context.Context, after, through watermark.Cursor, ig Ignore) iter.Seq2[ChangeEntry, error] {
	panic("contract")
}

// Apply applies a batch in one transaction with a savepoint per entry; on
// any entry's failure nothing of the batch is applied and the error is an
// *EntryError.
func (s *Store) Apply(ctx context.Context, entries []ChangeEntry, opts ApplyOptions) (ApplyResult, error) {
	panic("contract")
}

// Has returns the subset of hashes whose bytes are present, in input order.
func (s *Store) Has(ctx context.Context, hashes []chunkstore.Hash) ([]chunkstore.Hash, error) {
	panic("contract")
}

// ReadChunk returns one chunk's bytes.
func (s *Store) ReadChunk(ctx context.Context, h chunkstore.Hash) ([]byte, error) { panic("contract") }

// Watermarks returns the persisted watermarks for peer (zero Set if none).
func (s *Store) Watermarks(ctx context.Context, peer string) (watermark.Set, error) {
	panic("contract")
}
func (s *Store) SetWatermarks(ctx context.Context, peer string, set watermark.Set) error {
	panic("contract")
}

// GC collects unreferenced chunks.
func (s *Store) GC(ctx context.Context) (chunkstore.GCStats, error) { panic("contract") }
