package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/wsync/wsync/vfs"
)

// ErrNoFUSE: /dev/fuse is missing, so nothing can be mounted.
var ErrNoFUSE = errors.New("fuse is not available")

// toErrno is the one place an error becomes an errno for the kernel. Store
// errors map through vfs.Errno (its sentinels, or a wrapped syscall.Errno):
// a size past the largest file is EFBIG, a full disk ENOSPC (a chunk
// write's ENOSPC or EDQUOT as itself, SQLite's "disk is full" as ENOSPC),
// the workspace's quota EDQUOT (vfs.ErrQuota) and its max file size EFBIG;
// a cancelled request is EINTR, as go-fuse expects of an honoured
// interrupt; everything else is EIO.
func toErrno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	}
	return vfs.Errno(err)
}
