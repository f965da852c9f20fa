package vfs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/wsync/wsync/internal/sqlitemigrate"
)

// Sentinel errors. Each maps to one errno (Errno); callers test with errors.Is.
var (
	ErrNotExist    = errors.New("no such file or directory")
	ErrExist       = errors.New("file exists")
	ErrNotDir      = errors.New("not a directory")
	ErrIsDir       = errors.New("is a directory")
	ErrNotEmpty    = errors.New("directory not empty")
	ErrInvalid     = errors.New("invalid argument")
	ErrPerm        = errors.New("operation not permitted")
	ErrNameTooLong = errors.New("file name too long")
	ErrCrossDevice = errors.New("cross-device link")
	ErrNoData      = errors.New("no such attribute")
	ErrNotSupp     = errors.New("operation not supported")
	ErrRange       = errors.New("result too large")
	ErrLoop        = errors.New("too many levels of symbolic links")
	// ErrFileTooBig: a write or truncate past chunkstore.MaxFileSize.
	ErrFileTooBig = errors.New("file too large")
	// ErrNoSpace: the disk (or the database) is full.
	ErrNoSpace = errors.New("no space left on device")
	// ErrPastEnd: a seek for data or a hole at or past the end of a file.
	ErrPastEnd = errors.New("no such device or address")
	// ErrQuota: the workspace's quota has no room (a *QuotaError says
	// which bound).
	ErrQuota = errors.New("disk quota exceeded")
	// ErrClosed: the store or handle is closed.
	ErrClosed = errors.New("store closed")
	// ErrSchemaTooNew: the database was written by a newer wsync.
	ErrSchemaTooNew = sqlitemigrate.ErrTooNew
)

var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{ErrNotExist, syscall.ENOENT},
	{ErrExist, syscall.EEXIST},
	{ErrNotDir, syscall.ENOTDIR},
	{ErrIsDir, syscall.EISDIR},
	{ErrNotEmpty, syscall.ENOTEMPTY},
	{ErrInvalid, syscall.EINVAL},
	{ErrPerm, syscall.EPERM},
	{ErrNameTooLong, syscall.ENAMETOOLONG},
	{ErrCrossDevice, syscall.EXDEV},
	{ErrNoData, syscall.ENODATA},
	{ErrNotSupp, syscall.EOPNOTSUPP},
	{ErrRange, syscall.ERANGE},
	{ErrLoop, syscall.ELOOP},
	{ErrFileTooBig, syscall.EFBIG},
	{ErrNoSpace, syscall.ENOSPC},
	{ErrQuota, syscall.EDQUOT},
	{ErrPastEnd, syscall.ENXIO},
	{ErrClosed, syscall.EIO},
}

// Errno maps an error from this package to its errno: 0 for nil, EIO for
// anything that is not one of the sentinels.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		// ENOSPC and EDQUOT from a chunk write or fsync pass through
		// as themselves.
		return en
	}
	if sqliteFull(err) {
		return syscall.ENOSPC
	}
	return syscall.EIO
}

// sqliteFull reports SQLite's "database or disk is full" (SQLITE_FULL, 13,
// in the primary byte of an extended code): a commit that could not grow
// the database or its WAL on a full disk.
func sqliteFull(err error) bool {
	var c interface{ Code() int }
	return errors.As(err, &c) && c.Code()&0xff == 13
}

// ErrnoName is the symbolic name of err's errno ("ENOENT"), for API errors.
func ErrnoName(err error) string {
	switch Errno(err) {
	case 0:
		return ""
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.ENOTDIR:
		return "ENOTDIR"
	case syscall.EISDIR:
		return "EISDIR"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENAMETOOLONG:
		return "ENAMETOOLONG"
	case syscall.EXDEV:
		return "EXDEV"
	case syscall.ENODATA:
		return "ENODATA"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	case syscall.ERANGE:
		return "ERANGE"
	case syscall.ELOOP:
		return "ELOOP"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EFBIG:
		return "EFBIG"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EDQUOT:
		return "EDQUOT"
	}
	return "EIO"
}

// PathError records the operation and path of a failure.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// EntryError names the change entry of a batch that failed to apply.
type EntryError struct {
	Index int // position in the batch
	Rev   int64
	Path  string
	Err   error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("apply entry %d (rev %d, %q): %v", e.Index, e.Rev, e.Path, e.Err)
}
func (e *EntryError) Unwrap() error { return e.Err }

// RestoreConflictError is a RestoreTrash refused because live nodes stand
// where it would restore (and RestoreOptions.Force was not given). Paths
// are the first of them (workspace form); More says there were others.
type RestoreConflictError struct {
	Paths []string
	More  bool
}

func (e *RestoreConflictError) Error() string {
	s := fmt.Sprintf("%d live paths in the way (%s", len(e.Paths), strings.Join(e.Paths, ", "))
	if e.More {
		s += ", ..."
	}
	return s + "); restore with force to replace them (they go to the trash)"
}

func (e *RestoreConflictError) Unwrap() error { return ErrExist }
