package vfs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

// The by-path operations serve the server's files API and tests. Paths are
// in store form (see ValidatePath); "" is the root. Symlinks are data: no
// operation here follows one. The server's store never holds a special
// file (nothing makes one there: Apply has no entry kind for it); should
// one exist, Stat and List hide it as the feed does, and a write replaces it.

func checkPath(p string, rootOK bool) error {
	if p == "" && rootOK {
		return nil
	}
	return ValidatePath(p)
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return &PathError{Op: op, Path: "/" + p, Err: err}
}

// ResolvePath returns the inode at path.
func (s *Store) ResolvePath(ctx context.Context, path string) (Ino, error) {
	if err := checkPath(path, true); err != nil {
		return 0, pathErr("resolve", path, err)
	}
	n, err := resolve(ctx, s.committed(), path)
	if err != nil {
		return 0, pathErr("resolve", path, err)
	}
	return n.ino, nil
}

// Stat returns the attributes of the node at path.
func (s *Store) Stat(ctx context.Context, path string) (Attr, error) {
	if err := checkPath(path, true); err != nil {
		return Attr{}, pathErr("stat", path, err)
	}
	n, err := resolve(ctx, s.committed(), path)
	if err == nil && n.kind.Special() {
		err = ErrNotExist
	}
	if err != nil {
		return Attr{}, pathErr("stat", path, err)
	}
	return s.overlay(n.attr()), nil
}

// List returns every entry of the directory at path, in name order.
func (s *Store) List(ctx context.Context, path string) ([]DirEntry, error) {
	ino, err := s.ResolvePath(ctx, path)
	if err != nil {
		return nil, err
	}
	var out []DirEntry
	after := ""
	for {
		page, err := s.ReadDir(ctx, ino, after, 1024)
		if err != nil {
			return nil, pathErr("list", path, err)
		}
		for _, e := range page {
			if !e.Kind.Special() {
				out = append(out, e)
			}
		}
		if len(page) < 1024 {
			return out, nil
		}
		after = page[len(page)-1].Name
	}
}

// Manifest returns a file's chunk list.
func (s *Store) Manifest(ctx context.Context, path string) (chunkstore.Manifest, error) {
	if err := checkPath(path, false); err != nil {
		return nil, pathErr("manifest", path, err)
	}
	n, err := resolve(ctx, s.committed(), path)
	if err != nil {
		return nil, pathErr("manifest", path, err)
	}
	if n.kind != KindFile {
		return nil, pathErr("manifest", path, ErrIsDir)
	}
	return n.decodeManifest()
}

// OpenReader returns a reader over the file at path as of now.
func (s *Store) OpenReader(ctx context.Context, path string) (io.ReaderAt, int64, error) {
	if err := checkPath(path, false); err != nil {
		return nil, 0, pathErr("open", path, err)
	}
	n, err := resolve(ctx, s.committed(), path)
	if err != nil {
		return nil, 0, pathErr("open", path, err)
	}
	if n.kind != KindFile {
		if n.kind == KindDir {
			return nil, 0, pathErr("open", path, ErrIsDir)
		}
		return nil, 0, pathErr("open", path, ErrInvalid)
	}
	m, err := n.decodeManifest()
	if err != nil {
		return nil, 0, err
	}
	return readerAt{ctx, s.readerFile(n.ino, m, n.size)}, n.size, nil
}

type readerAt struct {
	ctx context.Context
	f   *openFile
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) { return r.f.readAt(r.ctx, p, off) }

// ReadFile returns the whole content of the file at path.
func (s *Store) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, size, err := s.OpenReader(ctx, path)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	if _, err := r.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, pathErr("read", path, err)
	}
	return buf, nil
}

// ReadLinkPath returns the target of the symlink at path.
func (s *Store) ReadLinkPath(ctx context.Context, path string) (string, error) {
	if err := checkPath(path, false); err != nil {
		return "", pathErr("readlink", path, err)
	}
	n, err := resolve(ctx, s.committed(), path)
	if err != nil {
		return "", pathErr("readlink", path, err)
	}
	if n.kind != KindSymlink {
		return "", pathErr("readlink", path, ErrInvalid)
	}
	return n.target, nil
}

// parentOf resolves the directory that holds path.
func (t *wtx) parentOf(path string) (Ino, string, error) {
	dir, name := splitPath(path)
	p, err := resolve(t.ctx, t.tx, dir)
	if err != nil {
		return 0, "", err
	}
	if p.kind != KindDir {
		return 0, "", ErrNotDir
	}
	return p.ino, name, nil
}

// WriteFile replaces (or creates) the file at path with data; see
// WriteFileFrom.
func (s *Store) WriteFile(ctx context.Context, path string, data []byte, mode uint32) (Attr, error) {
	return s.WriteFileFrom(ctx, path, bytes.NewReader(data), mode)
}

// WriteFileFrom replaces (or creates) the file at path with the bytes of r,
// in one transaction: readers see the old content or the new, never a mix.
// The chunks are hashed and stored before the transaction begins.
func (s *Store) WriteFileFrom(ctx context.Context, path string, r io.Reader, mode uint32) (Attr, error) {
	if err := checkPath(path, false); err != nil {
		return Attr{}, pathErr("write", path, err)
	}
	stage := s.chunks.NewStage()
	defer stage.Release()
	m, err := s.storeChunks(ctx, stage, r, s.streamCheck(ctx, path))
	if err != nil {
		return Attr{}, pathErr("write", path, err)
	}
	var n node
	err = s.update(ctx, func(t *wtx) error {
		parent, name, err := t.parentOf(path)
		if err != nil {
			return err
		}
		cur, err := lookupNode(ctx, t.tx, parent, name)
		switch {
		case errors.Is(err, ErrNotExist):
			n, err = t.insertNode(parent, path, name, newNode{kind: KindFile, attr: NewAttr{Mode: mode, Uid: s.opts.Owner.Uid, Gid: s.opts.Owner.Gid}, manifest: m})
			return err
		case err != nil:
			return err
		case cur.kind == KindDir:
			return ErrIsDir
		case cur.kind != KindFile:
			// Never write through a symlink, nor into a special file:
			// replace it.
			if err := t.removeAt(parent, name, path, cur); err != nil {
				return err
			}
			n, err = t.insertNode(parent, path, name, newNode{kind: KindFile, attr: NewAttr{Mode: mode, Uid: s.opts.Owner.Uid, Gid: s.opts.Owner.Gid}, manifest: m})
			return err
		}
		if _, err := t.exec(`UPDATE nodes SET mode = ? WHERE ino = ?`, mode&0o7777, cur.ino); err != nil {
			return err
		}
		if _, err := t.setContent(&cur, m, t.now, nil); err != nil {
			return err
		}
		n, err = getNode(ctx, t.tx, cur.ino)
		t.inval = append(t.inval, Invalidation{Ino: cur.ino, Parent: parent, Name: name})
		return err
	})
	if err != nil {
		return Attr{}, pathErr("write", path, err)
	}
	s.markStale([]Invalidation{{Ino: n.ino}})
	return n.attr(), nil
}

// storeChunks reads r to its end in chunks, staging each; all-zero
// chunks become holes. check, when not nil, sees the total read after each
// chunk and may refuse it (the quota: streamCheck).
func (s *Store) storeChunks(ctx context.Context, stage *chunkstore.Stage, r io.Reader, check func(total int64) error) (chunkstore.Manifest, error) {
	b := getBuf()
	defer putBuf(b)
	var m chunkstore.Manifest
	var total int64
	for {
		n, err := fill(r, *b)
		end := err == io.EOF
		if err != nil && !end {
			// A reader that failed fails the write: what it gave is not
			// stored. io.ErrUnexpectedEOF is a failure too: a request
			// body that broke off before its length says so.
			return nil, err
		}
		if total += int64(n); total > chunkstore.MaxFileSize {
			return nil, ErrFileTooBig
		}
		if check != nil {
			if err := check(total); err != nil {
				return nil, err
			}
		}
		if n > 0 {
			ref, perr := s.storeImage(ctx, stage, (*b)[:n])
			if perr != nil {
				return nil, perr
			}
			m = m.Append(ref)
		}
		if end {
			return m, nil
		}
	}
}

// fill reads r into b until b is full (nil) or r ends (io.EOF, with what
// it read) or fails. Unlike io.ReadFull it keeps a reader's own
// io.ErrUnexpectedEOF, which is an error, apart from a short last read.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// MkdirPath makes a directory; with parents, missing parents too and an
// existing directory is not an error (mkdir -p).
func (s *Store) MkdirPath(ctx context.Context, path string, mode uint32, parents bool) error {
	if err := checkPath(path, parents); err != nil {
		return pathErr("mkdir", path, err)
	}
	if err := s.room.admit(nodeCost); err != nil {
		return pathErr("mkdir", path, err)
	}
	attr := NewAttr{Mode: mode, Uid: s.opts.Owner.Uid, Gid: s.opts.Owner.Gid}
	err := s.update(ctx, func(t *wtx) error {
		if !parents {
			parent, name, err := t.parentOf(path)
			if err != nil {
				return err
			}
			if _, err := lookupNode(ctx, t.tx, parent, name); err == nil {
				return ErrExist
			} else if !errors.Is(err, ErrNotExist) {
				return err
			}
			_, err = t.insertNode(parent, path, name, newNode{kind: KindDir, attr: attr})
			return err
		}
		_, err := t.walkDirs(path, func(dir Ino, name, walked string, _ node, found bool) (Ino, error) {
			if found {
				return 0, ErrNotDir
			}
			n, err := t.insertNode(dir, walked, name, newNode{kind: KindDir, attr: attr})
			return n.ino, err
		})
		return err
	})
	return pathErr("mkdir", path, err)
}

// SymlinkPath makes a symlink at path pointing to target.
func (s *Store) SymlinkPath(ctx context.Context, target, path string) error {
	if err := checkPath(path, false); err != nil {
		return pathErr("symlink", path, err)
	}
	if err := s.room.admit(nodeCost + len(target)); err != nil {
		return pathErr("symlink", path, err)
	}
	parent, err := s.ResolvePath(ctx, dirOf(path))
	if err != nil {
		return err
	}
	_, err = s.Symlink(ctx, parent, baseOf(path), target, NewAttr{Mode: 0o777, Uid: s.opts.Owner.Uid, Gid: s.opts.Owner.Gid})
	return pathErr("symlink", path, err)
}

// LinkPath adds newPath as a second name of the file at oldPath.
func (s *Store) LinkPath(ctx context.Context, oldPath, newPath string) error {
	if err := checkPath(newPath, false); err != nil {
		return pathErr("link", newPath, err)
	}
	ino, err := s.ResolvePath(ctx, oldPath)
	if err != nil {
		return err
	}
	parent, err := s.ResolvePath(ctx, dirOf(newPath))
	if err != nil {
		return err
	}
	_, err = s.Link(ctx, ino, parent, baseOf(newPath))
	return pathErr("link", newPath, err)
}

// RemovePath removes the node at path; a directory needs recursive unless
// it is empty (rm -r).
func (s *Store) RemovePath(ctx context.Context, path string, recursive bool) error {
	if err := checkPath(path, false); err != nil {
		return pathErr("remove", path, err)
	}
	err := s.update(ctx, func(t *wtx) error {
		parent, name, err := t.parentOf(path)
		if err != nil {
			return err
		}
		n, err := lookupNode(ctx, t.tx, parent, name)
		if err != nil {
			return err
		}
		if n.kind == KindDir && !recursive {
			if empty, err := t.isEmpty(n.ino); err != nil {
				return err
			} else if !empty {
				return ErrNotEmpty
			}
		}
		return t.removeAt(parent, name, path, n)
	})
	return pathErr("remove", path, err)
}

// RenamePath moves oldPath to newPath with rename(2)'s rules.
func (s *Store) RenamePath(ctx context.Context, oldPath, newPath string) error {
	if err := checkPath(oldPath, false); err != nil {
		return pathErr("rename", oldPath, err)
	}
	if err := checkPath(newPath, false); err != nil {
		return pathErr("rename", newPath, err)
	}
	err := s.update(ctx, func(t *wtx) error {
		op, on, err := t.parentOf(oldPath)
		if err != nil {
			return err
		}
		np, nn, err := t.parentOf(newPath)
		if err != nil {
			return err
		}
		return t.rename(op, on, np, nn, 0)
	})
	return pathErr("rename", oldPath, err)
}

// ChmodPath sets the permission bits of the node at path.
func (s *Store) ChmodPath(ctx context.Context, path string, mode uint32) error {
	return s.setAttrPath(ctx, "chmod", path, SetAttr{Mode: &mode})
}

// ChtimesPath sets the mtime of the node at path.
func (s *Store) ChtimesPath(ctx context.Context, path string, mtime time.Time) error {
	return s.setAttrPath(ctx, "chtimes", path, SetAttr{Mtime: &mtime})
}

// setAttrPath is SetAttr on the node at path; a failure to resolve path is
// ResolvePath's own error, a failure to set is op's.
func (s *Store) setAttrPath(ctx context.Context, op, path string, set SetAttr) error {
	ino, err := s.ResolvePath(ctx, path)
	if err != nil {
		return err
	}
	_, err = s.SetAttr(ctx, ino, set)
	return pathErr(op, path, err)
}

func dirOf(p string) string  { d, _ := splitPath(p); return d }
func baseOf(p string) string { _, b := splitPath(p); return b }
