package workspace

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/wsync/wsync/chunkstore"
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
	// ErrNoRuntime: the workspace has no runtime of the name. It is a
	// vfs.ErrNotExist, answered ENORUNTIME.
	ErrNoRuntime = fmt.Errorf("no such runtime: %w", vfs.ErrNotExist)
	// ErrRuntimeExists: Attach of a name already attached. A vfs.ErrExist.
	ErrRuntimeExists = fmt.Errorf("runtime already attached: %w", vfs.ErrExist)
	// ErrBadRuntime: a runtime name outside [a-z0-9][a-z0-9_-]{0,62}, or a
	// reserved one. A vfs.ErrInvalid.
	ErrBadRuntime = fmt.Errorf("bad runtime name: %w", vfs.ErrInvalid)
	// ErrObjectStoreUnavailable: the object store of shared workspaces
	// (serve --object-store) could not be reached: this server cannot
	// claim the workspace (who serves it is the store's to say), or cannot
	// read a chunk it keeps there (chunkstore.ErrRemoteUnavailable, an
	// alias); nothing was done, retry.
	ErrObjectStoreUnavailable = errors.New("object store unavailable")
	// ErrNoRemote: the workspace has no computerd to sync with (no endpoint,
	// or no remote could be built for it).
	ErrNoRemote = errors.New("workspace has no remote")
	// ErrNotSupported: the remote does not implement the call (a fake that
	// cannot verify).
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
	// ErrMassDelete: a pull was paused before its first deletion because
	// it would delete more of the workspace than the server allows
	// (MassDeleteOptions); nothing of its deletions was applied. Confirm
	// with a pull that allows it (pull --allow-mass-delete). See
	// *MassDeleteError.
	ErrMassDelete = errors.New("pull paused: it would delete too much of the workspace")
	// ErrRequestTimeout: a request's body stopped coming.
	ErrRequestTimeout = errors.New("request timed out")
	// ErrBusy: the workspace has too many calls in flight; retry later.
	ErrBusy = errors.New("workspace busy: too many calls in flight")
	// ErrExecBusy: computerd already runs as many commands as it allows;
	// retry later. It is an ErrBusy.
	ErrExecBusy = fmt.Errorf("computerd runs as many commands as it allows: %w", ErrBusy)
	// ErrTooManyExecs: the workspace runs as many commands as it allows
	// (Options.MaxExecs, serve --max-execs), foreground and detached
	// together; retry when one ends. It is an ErrExecBusy.
	ErrTooManyExecs = fmt.Errorf("the workspace runs as many commands as it allows (serve --max-execs): %w", ErrExecBusy)
	// ErrExecLost: the exec belongs to a container runtime that is gone
	// (computerd restarted or was replaced): its process and output went
	// with it. Answered 410 EEXEC_LOST.
	ErrExecLost = errors.New("the exec was lost with the container runtime that ran it")
	// ErrLogTruncated: the offset asked for is older than what the
	// command's bounded output log still holds. Answered 416
	// ELOG_TRUNCATED; the exec's log_start says where the log begins.
	ErrLogTruncated = errors.New("exec output truncated before the requested offset")
	// ErrBadExecID: an exec id that is not "<runtime id>:<n>". A
	// vfs.ErrInvalid.
	ErrBadExecID = fmt.Errorf("bad exec id: %w", vfs.ErrInvalid)
	// ErrUnauthorized: the API caller's bearer token is missing or wrong.
	ErrUnauthorized = errors.New("missing or wrong bearer token")
	// ErrTooLarge: a request body over the API's limit.
	ErrTooLarge = errors.New("request too large")
)

// Failures of the computerd side of a workspace: the API caller's request
// was fine, the server's peer was not. Each is an ErrPeer.
var (
	// ErrPeer: computerd failed the call (see PeerError).
	ErrPeer = errors.New("computerd failed")
	// ErrPeerAuth: computerd refused the server's token for the workspace
	// (the computerd_token it was created with), not the caller's.
	ErrPeerAuth = fmt.Errorf("%w: it refused the server's token for the workspace", ErrPeer)
	// ErrPeerUnavailable: there is no sync session with computerd: it ended
	// while the call was in flight, or could not be opened. The next call
	// dials again.
	ErrPeerUnavailable = fmt.Errorf("%w: no session with it", ErrPeer)
)

// PeerError is a failure a Remote saw on computerd's side: the peer's
// answer, or the end of the session with it. Code is the sync wire's name
// for it ("EAUTH", "ESHUTDOWN", "EPROTOCOL", "ENOENT"); the error registry
// gives it its API code and status, so a peer's refusal of the server's
// token is not taken for the API caller's.
type PeerError struct {
	Code string
	Err  error
}

// Error names computerd and, for a failure of its own, what failed.
func (e *PeerError) Error() string {
	if s := e.sentinel(); errors.Is(s, ErrPeer) {
		return s.Error() + ": " + e.Err.Error()
	}
	return "computerd: " + e.Err.Error()
}

// Unwrap gives the cause and the sentinel of the API code: ErrPeerAuth for
// EAUTH, ErrPeerUnavailable for ESHUTDOWN, vfs.ErrNotExist for ENOENT, and
// ErrPeer for a code the API has no sentinel for.
func (e *PeerError) Unwrap() []error { return []error{e.sentinel(), e.Err} }

func (e *PeerError) sentinel() error {
	return apiCodeOfWire(e.Code).sentinel(http.StatusBadGateway)
}

// apiCode is one row of the error registry of the HTTP API: the code
// (errno), the status of the answer, and the sentinel. The server answers
// an error with the first row it matches (errors.Is on err or an alias, or
// match); the client's error for an answer unwraps to the row's err, so
// errors.Is works the same on both sides of the API.
type apiCode struct {
	code   string
	status int
	err    error
	alias  []error          // encode only: also answered with this code
	match  func(error) bool // encode only
	wire   string           // a PeerError with this wire code has this row
}

// apiCodes is the one table of the API's error codes (docs/API.md, Errors).
// Order matters where an error matches more than one row: a refused push
// names the pull it waits for, whatever that pull failed with.
var apiCodes = []apiCode{
	{code: "EPENDING", status: http.StatusConflict, err: ErrPendingPull},
	{code: "ENOT_OWNER", status: http.StatusTemporaryRedirect, err: ErrNotOwner},
	{code: "EMASS_DELETE", status: http.StatusConflict, err: ErrMassDelete},
	{code: "EFBIG", status: http.StatusRequestEntityTooLarge, err: ErrTooLarge, alias: []error{vfs.ErrFileTooBig}, match: tooLarge},
	{code: "EDQUOT", status: http.StatusRequestEntityTooLarge, err: vfs.ErrQuota},
	{code: "ECANCELED", status: http.StatusInternalServerError, alias: []error{context.Canceled, context.DeadlineExceeded}},
	{code: "EEXEC_BUSY", status: http.StatusTooManyRequests, err: ErrExecBusy},
	{code: "EEXEC_LOST", status: http.StatusGone, err: ErrExecLost, wire: "EEXEC_LOST"},
	{code: "ELOG_TRUNCATED", status: http.StatusRequestedRangeNotSatisfiable, err: ErrLogTruncated, wire: "ELOG_TRUNCATED"},
	{code: "EBUSY", status: http.StatusTooManyRequests, err: ErrBusy},
	{code: "ETIMEDOUT", status: http.StatusRequestTimeout, err: ErrRequestTimeout},
	{code: "EPEER_AUTH", status: http.StatusBadGateway, err: ErrPeerAuth, wire: "EAUTH"},
	{code: "EPEER_UNAVAILABLE", status: http.StatusServiceUnavailable, err: ErrPeerUnavailable, wire: "ESHUTDOWN"},
	{code: "ENOTCONN", status: http.StatusServiceUnavailable, err: ErrNoRemote},
	{code: "EOBJECT_STORE", status: http.StatusServiceUnavailable, err: ErrObjectStoreUnavailable, alias: []error{chunkstore.ErrRemoteUnavailable}},
	{code: "EOPNOTSUPP", status: http.StatusNotImplemented, err: ErrNotSupported, alias: []error{vfs.ErrNotSupp}},
	{code: "ESHUTDOWN", status: http.StatusServiceUnavailable, err: ErrClosed},
	{code: "EAUTH", status: http.StatusUnauthorized, err: ErrUnauthorized},
	{code: "ENORUNTIME", status: http.StatusNotFound, err: ErrNoRuntime},
	{code: "ENOENT", status: http.StatusNotFound, err: vfs.ErrNotExist},
	{code: "EEXIST", status: http.StatusConflict, err: vfs.ErrExist},
	{code: "ENOTEMPTY", status: http.StatusConflict, err: vfs.ErrNotEmpty},
	{code: "EINVAL", status: http.StatusBadRequest, err: vfs.ErrInvalid},
	{code: "ENOTDIR", status: http.StatusBadRequest, err: vfs.ErrNotDir},
	{code: "EISDIR", status: http.StatusBadRequest, err: vfs.ErrIsDir},
	{code: "ENAMETOOLONG", status: http.StatusBadRequest, err: vfs.ErrNameTooLong},
	{code: "ELOOP", status: http.StatusBadRequest, err: vfs.ErrLoop},
	{code: "ERANGE", status: http.StatusBadRequest, err: vfs.ErrRange},
	{code: "EPERM", status: http.StatusForbidden, err: vfs.ErrPerm},
	{code: "EACCES", status: http.StatusForbidden},
	{code: "EXDEV", status: http.StatusInternalServerError, err: vfs.ErrCrossDevice},
	{code: "ENODATA", status: http.StatusInternalServerError, err: vfs.ErrNoData},
}

func tooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

func (c apiCode) matches(err error) bool {
	if c.err != nil && errors.Is(err, c.err) || c.match != nil && c.match(err) {
		return true
	}
	for _, a := range c.alias {
		if errors.Is(err, a) {
			return true
		}
	}
	return false
}

// sentinel is what an answer with this row's code unwraps to; a code with
// no sentinel of its own is an ErrPeer when computerd failed (status).
func (c apiCode) sentinel(status int) error {
	if c.err == nil && status == http.StatusBadGateway {
		return ErrPeer
	}
	return c.err
}

// lookup is the row of an API code.
func lookup(code string) (apiCode, bool) {
	for _, c := range apiCodes {
		if c.code == code {
			return c, true
		}
	}
	return apiCode{}, false
}

// apiCodeOf is the row of an API code; a code with no row (EIO, ENOSPC)
// is answered 500.
func apiCodeOf(code string) apiCode {
	if c, ok := lookup(code); ok {
		return c
	}
	return apiCode{code: code, status: http.StatusInternalServerError}
}

// apiCodeOfWire is the row of a PeerError's wire code: the row that
// renames it (EAUTH is the peer's refusal, not the caller's), else the row
// of the same name; a code with no row is 502, computerd's failure.
func apiCodeOfWire(wire string) apiCode {
	for _, c := range apiCodes {
		if c.wire == wire {
			return c
		}
	}
	if c, ok := lookup(wire); ok {
		return c
	}
	return apiCode{code: wire, status: http.StatusBadGateway}
}

// APIError names err for the HTTP API: its code (errno) and the status of
// the answer. Errors of the store are named by their errno (EIO for one
// it does not know).
func APIError(err error) (code string, status int) {
	if err == nil {
		return "", http.StatusOK
	}
	for _, c := range apiCodes {
		if c.matches(err) {
			return c.code, c.status
		}
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		c := apiCodeOfWire(pe.Code)
		return c.code, c.status
	}
	c := apiCodeOf(vfs.ErrnoName(err))
	return c.code, c.status
}

// ErrnoName is err's API code (APIError without the status).
func ErrnoName(err error) string {
	code, _ := APIError(err)
	return code
}

// APISentinel is the sentinel an API answer with code and status stands
// for (nil when the code has none): errors.Is(clientErr, vfs.ErrNotExist)
// holds for an ENOENT, errors.Is(clientErr, ErrPeer) for any 502.
func APISentinel(code string, status int) error {
	return apiCodeOf(code).sentinel(status)
}
