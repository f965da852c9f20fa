package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Every error the server answers with has its code and status from the
// one registry, and the client's error for that answer (APISentinel)
// satisfies errors.Is for the sentinels the server's error did.
func TestAPIErrorRegistry(t *testing.T) {
	peer := func(code string) error {
		return &workspace.PeerError{Code: code, Err: fmt.Errorf("peer: %s: it said no", code)}
	}
	for _, c := range []struct {
		name   string
		err    error
		code   string
		status int
		is     []error // errors.Is holds for these on both sides of the API
	}{
		{"not exist", &vfs.PathError{Op: "stat", Path: "/a", Err: vfs.ErrNotExist}, "ENOENT", 404, []error{vfs.ErrNotExist}},
		{"no workspace", workspace.ErrNoWorkspace, "ENOENT", 404, []error{vfs.ErrNotExist}},
		{"ignored", workspace.ErrIgnored, "ENOENT", 404, []error{vfs.ErrNotExist}},
		{"exists", workspace.ErrWorkspaceExists, "EEXIST", 409, []error{vfs.ErrExist}},
		{"not empty", vfs.ErrNotEmpty, "ENOTEMPTY", 409, []error{vfs.ErrNotEmpty}},
		{"bad name", workspace.ErrBadName, "EINVAL", 400, []error{vfs.ErrInvalid}},
		{"not dir", vfs.ErrNotDir, "ENOTDIR", 400, []error{vfs.ErrNotDir}},
		{"is dir", vfs.ErrIsDir, "EISDIR", 400, []error{vfs.ErrIsDir}},
		{"name too long", vfs.ErrNameTooLong, "ENAMETOOLONG", 400, []error{vfs.ErrNameTooLong}},
		{"loop", vfs.ErrLoop, "ELOOP", 400, []error{vfs.ErrLoop}},
		{"range", vfs.ErrRange, "ERANGE", 400, []error{vfs.ErrRange}},
		{"endpoint", workspace.ErrEndpointNotAllowed, "EPERM", 403, []error{vfs.ErrPerm}},
		{"access", syscall.EACCES, "EACCES", 403, nil},
		{"body too large", fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 1}), "EFBIG", 413, nil},
		{"file too large", vfs.ErrFileTooBig, "EFBIG", 413, nil},
		{"unauthorized", workspace.ErrUnauthorized, "EAUTH", 401, []error{workspace.ErrUnauthorized}},
		{"pending", fmt.Errorf("%w: %w", workspace.ErrPendingPull, peer("ESHUTDOWN")), "EPENDING", 409, []error{workspace.ErrPendingPull}},
		{"pending on a full container", fmt.Errorf("%w: %w", workspace.ErrPendingPull, peer("EFBIG")), "EPENDING", 409, []error{workspace.ErrPendingPull}},
		{"pending, caller gone", fmt.Errorf("%w: %w", workspace.ErrPendingPull, context.Canceled), "EPENDING", 409, []error{workspace.ErrPendingPull}},
		{"busy", workspace.ErrBusy, "EBUSY", 429, []error{workspace.ErrBusy}},
		{"no remote", workspace.ErrNoRemote, "ENOTCONN", 503, []error{workspace.ErrNoRemote}},
		{"not supported", workspace.ErrNotSupported, "EOPNOTSUPP", 501, []error{workspace.ErrNotSupported}},
		{"chunk store down", fmt.Errorf("read: %w", errors.Join(chunkstore.ErrCorrupt, fmt.Errorf("fetch: %w: dial tcp: refused", chunkstore.ErrRemoteUnavailable))), "EOBJECT_STORE", 503, nil},
		{"object store down", fmt.Errorf("claim: %w: %w", workspace.ErrObjectStoreUnavailable, errors.New("dial tcp: refused")), "EOBJECT_STORE", 503, []error{workspace.ErrObjectStoreUnavailable}},
		{"manager closed", workspace.ErrClosed, "ESHUTDOWN", 503, []error{workspace.ErrClosed}},
		{"canceled", fmt.Errorf("push: %w", context.Canceled), "ECANCELED", 500, nil},
		{"store full", syscall.ENOSPC, "ENOSPC", 500, nil},
		{"unknown", errors.New("disk on fire"), "EIO", 500, nil},

		// computerd's failures are its own, never the caller's.
		{"peer refused our token", peer("EAUTH"), "EPEER_AUTH", 502, []error{workspace.ErrPeerAuth, workspace.ErrPeer}},
		{"peer session lost", peer("ESHUTDOWN"), "EPEER_UNAVAILABLE", 503, []error{workspace.ErrPeerUnavailable, workspace.ErrPeer}},
		{"peer protocol", peer("EPROTOCOL"), "EPROTOCOL", 502, []error{workspace.ErrPeer}},
		{"peer disk full", peer("ENOSPC"), "ENOSPC", 502, []error{workspace.ErrPeer}},
		{"peer busy", peer("EBUSY"), "EBUSY", 429, []error{workspace.ErrBusy}},
		{"peer exec busy", peer("EEXEC_BUSY"), "EEXEC_BUSY", 429, []error{workspace.ErrExecBusy, workspace.ErrBusy}},
		{"peer not exist", peer("ENOENT"), "ENOENT", 404, []error{vfs.ErrNotExist}},
		{"peer lost the exec", peer("EEXEC_LOST"), "EEXEC_LOST", 410, []error{workspace.ErrExecLost}},
		{"peer log truncated", peer("ELOG_TRUNCATED"), "ELOG_TRUNCATED", 416, []error{workspace.ErrLogTruncated}},
		{"too many execs", workspace.ErrTooManyExecs, "EEXEC_BUSY", 429, []error{workspace.ErrExecBusy, workspace.ErrBusy}},
		{"bad exec id", workspace.ErrBadExecID, "EINVAL", 400, []error{vfs.ErrInvalid}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, status := workspace.APIError(c.err)
			if code != c.code || status != c.status {
				t.Errorf("APIError = %s %d, want %s %d", code, status, c.code, c.status)
			}
			decoded := workspace.APISentinel(code, status)
			for _, target := range c.is {
				if !errors.Is(c.err, target) {
					t.Errorf("server side: errors.Is(%v, %v) false", c.err, target)
				}
				if !errors.Is(decoded, target) {
					t.Errorf("client side: errors.Is(%v, %v) false", decoded, target)
				}
			}
			if got := workspace.ErrnoName(c.err); got != code {
				t.Errorf("ErrnoName = %s, APIError's code %s", got, code)
			}
		})
	}
}
