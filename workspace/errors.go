package workspace

import (
	"errors"
	"fmt"

	"github.com/wsync/wsync/vfs"
)

// Sentinel errors. Those that wrap a vfs sentinel carry its errno, so the
// HTTP layer and errors.Is callers treat them like the store's own errors.
var (
	// ErrNoWorkspace: no workspace has the name. It is a vfs.ErrNotExist.
	ErrNoWorkspace = fmt.Errorf("no such workspace: %w", vfs.ErrNotExist)
	// ErrWorkspaceExists: Create of a name already registered. A vfs.ErrExist.
	ErrWorkspaceExists = fmt.Errorf("workspace already exists: %w", vfs.ErrExist)
	// ErrBadName: a workspace name outside [a-z0-9][a-z0-9_-]{0,62}. A vfs.ErrInvalid.
	ErrBadName = fmt.Errorf("bad workspace name: %w", vfs.ErrInvalid)
	// ErrIgnored: the path is hidden by the workspace's ignore list. It is a
	// vfs.ErrNotExist: ignored paths are invisible to the files API.
	ErrIgnored = fmt.Errorf("path is ignored: %w", vfs.ErrNotExist)
	// ErrNoRemote: the workspace has no computerd to sync with (no endpoint,
	// or this build has no sync driver).
	ErrNoRemote = errors.New("workspace has no remote")
	// ErrNotSupported: the remote does not implement the call (Verify before
	// the convergence work lands).
	ErrNotSupported = errors.New("not supported by the remote")
	// ErrPushFailed wraps the push error of an exec bracket: nothing was
	// spawned.
	ErrPushFailed = errors.New("pre-exec push failed; the command was not started")
	// ErrClosed: the manager is closed.
	ErrClosed = errors.New("workspace manager closed")
	// ErrEndpointNotAllowed: Create named an endpoint outside the server's
	// --allow-endpoint patterns. A vfs.ErrPerm.
	ErrEndpointNotAllowed = fmt.Errorf("endpoint not allowed: %w", vfs.ErrPerm)
	// ErrPendingPull: a push (or an exec's push, or a repair) was refused
	// because the container has changes the server has not pulled and the
	// pull owed for them failed again. The container was not written; the
	// error wraps the pull's.
	ErrPendingPull = errors.New("a pull is pending: the container has changes the server has not pulled, and pulling them failed; nothing was pushed")
	// ErrBusy: the workspace has too many calls in flight; retry later.
	ErrBusy = errors.New("workspace busy: too many calls in flight")
)

// Errnoer is implemented by errors that carry a symbolic code of their own
// (a sync wire error such as "EAUTH" or "EEXEC_BUSY"). ErrnoName prefers it
// over the vfs mapping.
type Errnoer interface {
	Errno() string
}

// ErrnoName names err's code for API errors: the code of an Errnoer in its
// chain, else the vfs errno name ("ENOENT"), with EIO for anything unknown.
func ErrnoName(err error) string {
	if err == nil {
		return ""
	}
	// The workspace's own verdicts first: a refused push names the pull it
	// waits for, whatever code that pull failed with.
	switch {
	case errors.Is(err, ErrPendingPull):
		return "EPENDING"
	case errors.Is(err, ErrBusy):
		return "EBUSY"
	}
	var e Errnoer
	if errors.As(err, &e) {
		if c := e.Errno(); c != "" {
			return c
		}
	}
	switch {
	case errors.Is(err, ErrNoRemote):
		return "ENOTCONN"
	case errors.Is(err, ErrNotSupported):
		return "EOPNOTSUPP"
	case errors.Is(err, ErrClosed):
		return "ESHUTDOWN"
	}
	return vfs.ErrnoName(err)
}
