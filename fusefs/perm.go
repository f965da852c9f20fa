package fusefs

import (
	"context"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

// caller is the process behind a FUSE request. Requests the kernel makes on
// its own (writeback of mmap'ed pages) carry uid 0.
func callerOf(ctx context.Context) fuse.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return *c
	}
	return fuse.Caller{}
}

// newNodeAttr is the owner and mode of a node the caller creates in parent,
// following what Linux does on a local disk: the caller's uid, the caller's
// gid unless parent is setgid (then the parent's gid, and a new directory
// stays setgid), and a new file's setgid bit dropped when the caller is not
// in its group. Group membership is approximated by the primary gid: FUSE
// requests do not carry supplementary groups.
func newNodeAttr(parent vfs.Attr, c fuse.Caller, mode uint32, dir bool) vfs.NewAttr {
	mode &= 07777
	a := vfs.NewAttr{Mode: mode, Uid: c.Uid, Gid: c.Gid}
	if parent.Mode&syscall.S_ISGID != 0 {
		a.Gid = parent.Gid
		if dir {
			a.Mode |= syscall.S_ISGID
		}
	}
	if !dir && a.Mode&syscall.S_ISGID != 0 && c.Uid != 0 && c.Gid != a.Gid {
		a.Mode &^= syscall.S_ISGID
	}
	return a
}

// setattrRequest is a SETATTR decoded into the store's terms.
type setattrRequest struct {
	sa       vfs.SetAttr
	size     *int64
	explicit bool // times given as values, not "now"
}

// The store keeps times as int64 nanoseconds since the epoch.
var minTime, maxTime = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// clampTime brings a time utimensat(2) set to the nearest one the store
// can hold, as the kernel clamps to any file system's range: outside it,
// the nanoseconds wrapped round (the year 36812 became 1738).
func clampTime(t time.Time) time.Time {
	switch {
	case t.Before(minTime):
		return minTime
	case t.After(maxTime):
		return maxTime
	}
	return t
}

func decodeSetattr(in *fuse.SetAttrIn) setattrRequest {
	var r setattrRequest
	if m, ok := in.GetMode(); ok {
		r.sa.Mode = &m
	}
	if uid, ok := in.GetUID(); ok {
		r.sa.Uid = &uid
	}
	if gid, ok := in.GetGID(); ok {
		r.sa.Gid = &gid
	}
	if t, ok := in.GetATime(); ok {
		t = clampTime(t)
		r.sa.Atime = &t
		r.explicit = r.explicit || in.Valid&fuse.FATTR_ATIME_NOW == 0
	}
	if t, ok := in.GetMTime(); ok {
		t = clampTime(t)
		r.sa.Mtime = &t
		r.explicit = r.explicit || in.Valid&fuse.FATTR_MTIME_NOW == 0
	}
	if sz, ok := in.GetSize(); ok {
		s := int64(sz)
		r.size = &s
	}
	return r
}

// checkSetattr applies POSIX's ownership rules to a SETATTR by c on a node
// with attributes cur. The kernel (default_permissions) checks the same
// before it sends the request, with the caller's supplementary groups; this
// is the file system's own guard and stays deliberately simple:
//
//   - chmod: the owner or root. A mode change that only clears the setuid
//     and setgid bits is allowed to anyone: it is how the kernel strips
//     them when a non-owner writes to or truncates the file.
//   - chown to another uid: root only.
//   - chgrp: root, or the owner (the kernel has checked membership).
//   - utimens with explicit times: the owner or root ("now" needs only
//     write permission, which the kernel checked).
func checkSetattr(c fuse.Caller, cur vfs.Attr, r setattrRequest) error {
	root, owner := c.Uid == 0, c.Uid == cur.Uid
	if root {
		return nil
	}
	if r.sa.Mode != nil && !owner {
		const priv = syscall.S_ISUID | syscall.S_ISGID
		m := *r.sa.Mode
		stripsOnly := m != cur.Mode && m&^cur.Mode == 0 && (cur.Mode&^m)&^priv == 0
		if !stripsOnly {
			return fmt.Errorf("chmod by uid %d of a node owned by %d: %w", c.Uid, cur.Uid, vfs.ErrPerm)
		}
	}
	if r.sa.Uid != nil && *r.sa.Uid != cur.Uid {
		return fmt.Errorf("chown to uid %d by uid %d: %w", *r.sa.Uid, c.Uid, vfs.ErrPerm)
	}
	if r.sa.Gid != nil && *r.sa.Gid != cur.Gid && !owner {
		return fmt.Errorf("chgrp by uid %d of a node owned by %d: %w", c.Uid, cur.Uid, vfs.ErrPerm)
	}
	if r.explicit && !owner {
		return fmt.Errorf("utimens by uid %d of a node owned by %d: %w", c.Uid, cur.Uid, vfs.ErrPerm)
	}
	return nil
}

// fillAttr converts a store attribute into the kernel's.
func fillAttr(out *fuse.Attr, a vfs.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = uint64(a.Size)
	out.Blocks = (uint64(a.Size) + 511) / 512
	// A large st_blksize makes stdio and cp(1) buffer more per write(2),
	// and every write(2) is a round trip here.
	out.Blksize = blockSize
	out.Mode = kindMode(a.Kind) | a.Mode&07777
	out.Rdev = a.Rdev
	out.Nlink = a.Nlink
	out.Uid = a.Uid
	out.Gid = a.Gid
	atime, mtime, ctime := a.Atime, a.Mtime, a.Ctime
	if ctime.IsZero() {
		ctime = mtime
	}
	if atime.IsZero() {
		atime = mtime
	}
	out.SetTimes(nonZero(atime), nonZero(mtime), nonZero(ctime))
}

const blockSize = 64 << 10

func nonZero(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// kindMode is the S_IFMT bits of a kind.
func kindMode(k vfs.Kind) uint32 {
	switch k {
	case vfs.KindDir:
		return syscall.S_IFDIR
	case vfs.KindSymlink:
		return syscall.S_IFLNK
	case vfs.KindFifo:
		return syscall.S_IFIFO
	case vfs.KindSocket:
		return syscall.S_IFSOCK
	case vfs.KindCharDev:
		return syscall.S_IFCHR
	case vfs.KindBlockDev:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}
