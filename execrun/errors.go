package execrun

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Sentinel errors; callers (and the wire layer, which maps them to EEXEC_*
// codes) test with errors.Is.
var (
	// ErrBusy: the concurrency limit is reached; retry after an exec ends.
	ErrBusy = errors.New("too many running execs")
	// ErrExecLost: the id was issued by another runtime (a previous run of
	// this daemon); its process and output are gone with it.
	ErrExecLost = errors.New("exec belongs to another runtime")
	// ErrLogTruncated: the requested offset was dropped from the bounded
	// output log. The *TruncatedError carrying it says where the log starts.
	ErrLogTruncated = errors.New("exec output truncated before the requested offset")
	// ErrNotFound: no exec of this runtime has the id (never issued, or
	// evicted from retention).
	ErrNotFound = errors.New("no such exec")
	// ErrBadCwd: the working directory is outside the mount root, escapes it
	// through ".." or a symlink, or is not a directory. It is an invalid
	// argument: errors.Is(err, os.ErrInvalid) holds and its errno is EINVAL.
	ErrBadCwd error = &invalidError{"working directory not inside the mount"}
	// ErrBadSpec: a malformed request (no command or two, bad env entry,
	// timeout out of range, bad signal or offset). Also an invalid argument.
	ErrBadSpec error = &invalidError{"bad exec request"}
	// ErrClosed: the runner was shut down and starts nothing new.
	ErrClosed = errors.New("exec runner shut down")
)

// invalidError is a sentinel that is also an invalid argument, for both
// os.ErrInvalid and errno EINVAL (which errors.Is does not equate).
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Unwrap() error        { return syscall.EINVAL }
func (e *invalidError) Is(target error) bool { return target == fs.ErrInvalid }

// TruncatedError reports an attach or read at an offset the log no longer
// holds. Start is the oldest offset still retained: attaching there resumes
// with the newest bytes.
type TruncatedError struct {
	ID     string
	Offset int64
	Start  int64
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("exec %s: offset %d, log starts at %d: %v", e.ID, e.Offset, e.Start, ErrLogTruncated)
}

func (e *TruncatedError) Unwrap() error { return ErrLogTruncated }
