package client

import (
	"errors"
	"fmt"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Sentinels for errors the HTTP layer raises.
var (
	ErrUnauthorized = errors.New("unauthorized: missing or wrong token")
	ErrTooLarge     = errors.New("request too large")
)

// Error is an error response from the server.
type Error struct {
	Status  int    // HTTP status
	Code    string // the errno name: "ENOENT", "EAUTH", ...
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("server: %s (HTTP %d)", e.Message, e.Status)
	}
	return fmt.Sprintf("server: %s (%s)", e.Message, e.Code)
}

// Unwrap returns the sentinel of the errno, so errors.Is works across the
// API.
func (e *Error) Unwrap() error { return sentinels[e.Code] }

// Errno is the errno name; it makes *Error a workspace.Errnoer, so
// workspace.ErrnoName names the server's code.
func (e *Error) Errno() string { return e.Code }

var _ workspace.Errnoer = (*Error)(nil)

var sentinels = map[string]error{
	"ENOENT":       vfs.ErrNotExist,
	"EEXIST":       vfs.ErrExist,
	"ENOTDIR":      vfs.ErrNotDir,
	"EISDIR":       vfs.ErrIsDir,
	"ENOTEMPTY":    vfs.ErrNotEmpty,
	"EINVAL":       vfs.ErrInvalid,
	"EPERM":        vfs.ErrPerm,
	"ENAMETOOLONG": vfs.ErrNameTooLong,
	"EXDEV":        vfs.ErrCrossDevice,
	"ENODATA":      vfs.ErrNoData,
	"ERANGE":       vfs.ErrRange,
	"ELOOP":        vfs.ErrLoop,
	"EOPNOTSUPP":   workspace.ErrNotSupported,
	"ENOTCONN":     workspace.ErrNoRemote,
	"ESHUTDOWN":    workspace.ErrClosed,
	"EBUSY":        workspace.ErrBusy,
	"EEXEC_BUSY":   workspace.ErrBusy,
	"EPENDING":     workspace.ErrPendingPull,
	"EAUTH":        ErrUnauthorized,
	"EFBIG":        ErrTooLarge,
}
