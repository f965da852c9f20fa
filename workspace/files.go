package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wsync/wsync/vfs"
)

// The files API works on the server store directly: reads and writes do
// not wait for the FIFO (the store serialises its own writers) and do not
// sync. A write reaches the container on the next push, tick or exec.
//
// Paths are workspace paths ("/src/a.go"; "src/a.go" and "/" work too).
// Ignored paths are invisible: stat, read and list act as if they did not
// exist, and writes to them are refused the same way.

// FileInfo is one node as `ls --json` and `stat --json` print it
// (docs/API.md "File objects"). Target is set for symlinks, SHA256 for files (when asked).
type FileInfo struct {
	Path   string    `json:"path"`
	Type   string    `json:"type"` // "file", "dir" or "symlink"
	Mode   uint32    `json:"mode"` // permission bits
	Size   int64     `json:"size"`
	Mtime  time.Time `json:"mtime"`
	Target string    `json:"target"`
	SHA256 string    `json:"sha256"`
	// PathBytes is Path's exact bytes, set only when Path is not valid
	// UTF-8 (a name made in the container: Linux takes any bytes but '/'
	// and NUL). A JSON string cannot hold such a path: the encoder writes
	// each bad byte as U+FFFD, and the path it shows names another file.
	// TargetBytes is the same for Target.
	PathBytes   []byte `json:"path_bytes,omitempty"`
	TargetBytes []byte `json:"target_bytes,omitempty"`
}

// fileInfo is the FileInfo of the node at sp (store form) with attributes
// a, but for what takes a read of its own (a symlink's target, a hash).
func fileInfo(sp string, a vfs.Attr) FileInfo {
	fi := FileInfo{Path: "/" + sp, Type: a.Kind.String(), Mode: a.Mode & 0o7777, Size: a.Size, Mtime: a.Mtime.UTC()}
	fi.PathBytes = unlessUTF8(fi.Path)
	return fi
}

// unlessUTF8 is s's bytes when s is not valid UTF-8 (JSON cannot carry
// it as it is), else nil.
func unlessUTF8(s string) []byte {
	if utf8.ValidString(s) {
		return nil
	}
	return []byte(s)
}

// MaxList bounds one List: a listing past it fails with vfs.ErrRange
// rather than grow without bound.
const MaxList = 1 << 20

// clean turns a workspace path into store form.
func clean(op, p string) (string, error) {
	sp, err := vfs.CleanAPIPath(p)
	if err != nil {
		return "", &vfs.PathError{Op: op, Path: p, Err: err}
	}
	return sp, nil
}

// What a path is to the ignore check (refuseIgnored): what stands there
// (asked of the store), or what the call makes there.
type pathKind int

const (
	existing pathKind = iota
	makesFile
	makesDir
)

// onStore cleans path for op and returns the workspace's store and the
// path's store form, refusing an ignored path (kind: what it is to the
// check). check (nil: none) may refuse the cleaned path before the store
// is opened.
func (w *Workspace) onStore(ctx context.Context, op, path string, kind pathKind, check func(sp string) error) (*vfs.Store, string, error) {
	sp, err := clean(op, path)
	if err != nil {
		return nil, "", err
	}
	if check != nil {
		if err := check(sp); err != nil {
			return nil, "", err
		}
	}
	s, err := w.Store(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := w.refuseIgnored(ctx, s, op, sp, kind); err != nil {
		return nil, "", err
	}
	return s, sp, nil
}

// refuseIgnored fails with ErrIgnored when the patterns in force ignore sp:
// a directory above it is ignored, or sp itself is excluded as what it is
// (a directory-only pattern needs to know; the store is asked only then).
func (w *Workspace) refuseIgnored(ctx context.Context, s *vfs.Store, op, sp string, kind pathKind) error {
	if sp == "" {
		return nil
	}
	ig, err := w.Matcher(ctx)
	if err != nil {
		return err
	}
	ignored := false
	if i := strings.LastIndexByte(sp, '/'); i > 0 {
		ignored = ig.Match(sp[:i], true)
	}
	if !ignored {
		asFile, asDir := ig.Excludes(sp, false), ig.Excludes(sp, true)
		ignored = asFile
		if asFile != asDir {
			isDir := kind == makesDir
			if kind == existing {
				a, err := s.Stat(ctx, sp)
				isDir = err == nil && a.Kind == vfs.KindDir
			}
			if isDir {
				ignored = asDir
			}
		}
	}
	if ignored {
		return &vfs.PathError{Op: op, Path: "/" + sp, Err: ErrIgnored}
	}
	return nil
}

// refuseRoot is the check of a call that cannot act on the root: op
// fails there with err.
func refuseRoot(op string, err error) func(sp string) error {
	return func(sp string) error {
		if sp == "" {
			return &vfs.PathError{Op: op, Path: "/", Err: err}
		}
		return nil
	}
}

// Stat returns the node at path; with hash, a file's SHA256 is computed by
// reading it.
func (w *Workspace) Stat(ctx context.Context, path string, hash bool) (FileInfo, error) {
	s, sp, err := w.onStore(ctx, "stat", path, existing, nil)
	if err != nil {
		return FileInfo{}, err
	}
	return w.info(ctx, s, sp, hash)
}

// maxRereads bounds the reads of one node that info makes while the
// node keeps being replaced under it.
const maxRereads = 8

// info reads the node at sp. A symlink's target and a file's hash are read
// after its attributes, so the node may be replaced in between by one of
// another kind (a write over a symlink, a rename over a file), and that
// read fails (readlink of a file, open of a symlink or a directory): the
// node is then read again as what it now is.
func (w *Workspace) info(ctx context.Context, s *vfs.Store, sp string, hash bool) (FileInfo, error) {
	for try := 1; ; try++ {
		a, err := s.Stat(ctx, sp)
		if err != nil {
			return FileInfo{}, err
		}
		fi := fileInfo(sp, a)
		switch {
		case a.Kind == vfs.KindSymlink:
			fi.Target, err = s.ReadLinkPath(ctx, sp)
			fi.TargetBytes = unlessUTF8(fi.Target)
		case a.Kind == vfs.KindFile && hash:
			fi.SHA256, err = fileSHA256(ctx, s, sp)
		}
		if err == nil {
			return fi, nil
		}
		if try == maxRereads || !replaced(ctx, s, sp, a.Ino) {
			return FileInfo{}, err
		}
	}
}

// replaced reports whether the node at sp is no longer ino: another
// stands there, or none (the next read says which).
func replaced(ctx context.Context, s *vfs.Store, sp string, ino vfs.Ino) bool {
	a, err := s.Stat(ctx, sp)
	return err != nil || a.Ino != ino
}

// fileSHA256 hashes a file's bytes as they stream out of the store. A
// sparse file reads its holes as zeros without touching chunks, but every
// byte still goes through sha256 (a 1 TiB file is minutes of CPU), so the
// caller's context is checked between chunks: a client that goes away
// stops the work.
func fileSHA256(ctx context.Context, s *vfs.Store, sp string) (string, error) {
	r, size, err := s.OpenReader(ctx, sp)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	buf := make([]byte, 512<<10)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return "", &vfs.PathError{Op: "hash", Path: "/" + sp, Err: err}
		}
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		h.Write(buf[:n])
		off += int64(n)
		if err != nil && !(errors.Is(err, io.EOF) && off == size) {
			return "", &vfs.PathError{Op: "hash", Path: "/" + sp, Err: err}
		}
		if n == 0 && err == nil {
			return "", &vfs.PathError{Op: "hash", Path: "/" + sp, Err: io.ErrUnexpectedEOF}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// List lists the directory at path (its entries, in name order; with
// recursive, the whole subtree depth first, each directory before its
// children). A file lists as itself, as ls does. Ignored names are left out.
// It collects Walk's entries, at most MaxList of them.
func (w *Workspace) List(ctx context.Context, path string, recursive, hash bool) ([]FileInfo, error) {
	var out []FileInfo
	err := w.Walk(ctx, path, recursive, hash, func(fi FileInfo) error {
		if len(out) >= MaxList {
			return &vfs.PathError{Op: "list", Path: path, Err: fmt.Errorf("%w: more than %d entries", vfs.ErrRange, MaxList)}
		}
		out = append(out, fi)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Walk calls yield with each entry List returns, in the same order, as it
// reads them: it holds one directory's listing per level, never the whole
// answer, so a caller that made a large tree cheaply cannot make the
// server hold it (the API streams a listing this way). An error from yield
// ends the walk and is returned.
func (w *Workspace) Walk(ctx context.Context, path string, recursive, hash bool, yield func(FileInfo) error) error {
	s, sp, err := w.onStore(ctx, "list", path, existing, nil)
	if err != nil {
		return err
	}
	ig, err := w.Matcher(ctx)
	if err != nil {
		return err
	}
	top, err := w.info(ctx, s, sp, hash)
	if err != nil {
		return err
	}
	if top.Type != vfs.KindDir.String() {
		return yield(top)
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := s.List(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			child := e.Name
			if dir != "" {
				child = dir + "/" + e.Name
			}
			if ig.Excludes(child, e.Kind == vfs.KindDir) {
				continue // its parent is not ignored: the walk never enters an ignored directory
			}
			fi, err := w.info(ctx, s, child, hash)
			if gone(err) {
				continue
			}
			if err != nil {
				return err
			}
			// The child is listed as what it is now: one whose kind
			// changed since the listing is asked of the patterns again
			// (a directory-only pattern), and walked if it is a
			// directory now.
			isDir := fi.Type == vfs.KindDir.String()
			if isDir != (e.Kind == vfs.KindDir) && ig.Excludes(child, isDir) {
				continue
			}
			if err := yield(fi); err != nil {
				return err
			}
			if recursive && isDir {
				if err := walk(child); err != nil && !gone(err) {
					return err
				}
			}
		}
		return nil
	}
	return walk(sp)
}

// gone reports an error of Walk's that says a node it listed is not there
// to read any more: removed, or a directory on its path replaced by a
// file (ENOTDIR). Neither is an error for ls.
func gone(err error) bool {
	return errors.Is(err, vfs.ErrNotExist) || errors.Is(err, vfs.ErrNotDir)
}

// Open returns a reader over the file at path as it is now.
func (w *Workspace) Open(ctx context.Context, path string) (io.ReaderAt, FileInfo, error) {
	s, sp, err := w.onStore(ctx, "open", path, existing, nil)
	if err != nil {
		return nil, FileInfo{}, err
	}
	fi, err := w.info(ctx, s, sp, false)
	if err != nil {
		return nil, FileInfo{}, err
	}
	if fi.Type == vfs.KindDir.String() {
		return nil, FileInfo{}, &vfs.PathError{Op: "open", Path: fi.Path, Err: vfs.ErrIsDir}
	}
	r, size, err := s.OpenReader(ctx, sp)
	if err != nil {
		return nil, FileInfo{}, err
	}
	fi.Size = size
	return r, fi, nil
}

// WriteFile replaces (or creates) the file at path with r's bytes in one
// transaction: readers see the old content or the new. A nil mode keeps an
// existing file's mode and gives a new one 0644. It answers with the file
// as the write committed it.
func (w *Workspace) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) (FileInfo, error) {
	if mode != nil {
		if err := checkMode("write", path, *mode); err != nil {
			return FileInfo{}, err
		}
	}
	s, sp, err := w.onStore(ctx, "write", path, makesFile, refuseRoot("write", vfs.ErrIsDir))
	if err != nil {
		return FileInfo{}, err
	}
	if sp == IgnoreFile {
		// Refused whole rather than used in part (see Patterns).
		b, err := io.ReadAll(io.LimitReader(r, MaxIgnoreFile+1))
		if err != nil {
			return FileInfo{}, &vfs.PathError{Op: "write", Path: "/" + sp, Err: err}
		}
		if err := checkIgnoreFile(b); err != nil {
			return FileInfo{}, &vfs.PathError{Op: "write", Path: "/" + sp, Err: err}
		}
		r = bytes.NewReader(b)
	}
	m := uint32(0o644)
	if mode != nil {
		m = *mode
	} else if a, err := s.Stat(ctx, sp); err == nil && a.Kind == vfs.KindFile {
		m = a.Mode & 0o7777
	}
	a, err := s.WriteFileFrom(ctx, sp, r, m)
	if err != nil {
		return FileInfo{}, err
	}
	// Not a stat after the commit: another caller may remove the file
	// before it, and a committed write is not a failure.
	return fileInfo(sp, a), nil
}

// checkMode refuses a mode with bits outside the permission bits (a stat
// mode with its type bits, 0100644, or any larger number): cut to its low
// twelve bits, it would set a mode nobody asked for.
func checkMode(op, path string, mode uint32) error {
	if extra := mode &^ 0o7777; extra != 0 {
		return &vfs.PathError{Op: op, Path: path, Err: fmt.Errorf("%w: mode %#o has bits %#o outside 07777", vfs.ErrInvalid, mode, extra)}
	}
	return nil
}

// Mkdir makes a directory (with parents, mkdir -p).
func (w *Workspace) Mkdir(ctx context.Context, path string, mode uint32, parents bool) error {
	if err := checkMode("mkdir", path, mode); err != nil {
		return err
	}
	s, sp, err := w.onStore(ctx, "mkdir", path, makesDir, nil)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o755
	}
	return s.MkdirPath(ctx, sp, mode, parents)
}

// Remove removes the node at path; a non-empty directory needs recursive.
func (w *Workspace) Remove(ctx context.Context, path string, recursive bool) error {
	s, sp, err := w.onStore(ctx, "remove", path, existing, refuseRoot("remove", vfs.ErrInvalid))
	if err != nil {
		return err
	}
	return s.RemovePath(ctx, sp, recursive)
}

// Rename moves src to dst with rename(2)'s rules and answers with the node
// it moved, at dst. The node is read before the move, which keeps its
// attributes (all but its ctime): a stat of dst after the commit would
// fail if another caller removed dst in between, and a committed move is
// not a failure.
func (w *Workspace) Rename(ctx context.Context, src, dst string) (FileInfo, error) {
	s, ss, err := w.onStore(ctx, "rename", src, existing, nil)
	if err != nil {
		return FileInfo{}, err
	}
	moved, serr := w.info(ctx, s, ss, false)
	// The destination is what the source is.
	kind := makesFile
	if serr == nil && moved.Type == vfs.KindDir.String() {
		kind = makesDir
	}
	_, ds, err := w.onStore(ctx, "rename", dst, kind, func(ds string) error {
		if ss == "" || ds == "" {
			return &vfs.PathError{Op: "rename", Path: "/", Err: vfs.ErrInvalid}
		}
		return nil
	})
	if err != nil {
		return FileInfo{}, err
	}
	if serr != nil {
		return FileInfo{}, serr // no source to move
	}
	if ds == IgnoreFile && ss != IgnoreFile {
		if err := w.checkIgnoreFileAt(ctx, s, ss); err != nil {
			return FileInfo{}, &vfs.PathError{Op: "rename", Path: "/" + ds, Err: err}
		}
	}
	if err := s.RenamePath(ctx, ss, ds); err != nil {
		return FileInfo{}, err
	}
	moved.Path = "/" + ds
	moved.PathBytes = unlessUTF8(moved.Path)
	return moved, nil
}

// Symlink makes a symlink at path pointing to target. The target is data:
// it is stored as given and never followed on the server.
func (w *Workspace) Symlink(ctx context.Context, target, path string) error {
	s, sp, err := w.onStore(ctx, "symlink", path, makesFile, func(sp string) error {
		if sp == "" {
			return &vfs.PathError{Op: "symlink", Path: "/", Err: vfs.ErrExist}
		}
		if target == "" || len(target) > vfs.MaxTargetLen {
			return &vfs.PathError{Op: "symlink", Path: "/" + sp, Err: fmt.Errorf("%w: target of %d bytes", vfs.ErrInvalid, len(target))}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.SymlinkPath(ctx, target, sp)
}

// Chmod sets the permission bits of the node at path.
func (w *Workspace) Chmod(ctx context.Context, path string, mode uint32) error {
	if err := checkMode("chmod", path, mode); err != nil {
		return err
	}
	s, sp, err := w.onStore(ctx, "chmod", path, existing, nil)
	if err != nil {
		return err
	}
	return s.ChmodPath(ctx, sp, mode)
}

// checkIgnoreFileAt checks the file at sp as the IgnoreFile it is about to
// become (a file of another kind is not read as one: Patterns says so).
func (w *Workspace) checkIgnoreFileAt(ctx context.Context, s *vfs.Store, sp string) error {
	a, err := s.Stat(ctx, sp)
	if err != nil || a.Kind != vfs.KindFile {
		return nil // the rename reports what is wrong with the source
	}
	if a.Size > MaxIgnoreFile {
		return fmt.Errorf("%w: %s of %d bytes (at most %d)", vfs.ErrInvalid, IgnoreFile, a.Size, MaxIgnoreFile)
	}
	r, size, err := s.OpenReader(ctx, sp)
	if err != nil {
		return err
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return checkIgnoreFile(b)
}
