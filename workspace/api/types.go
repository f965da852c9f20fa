package api

import "github.com/wsync/wsync/workspace"

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
	Errno string `json:"errno,omitempty"`
}

// CreateWorkspaceRequest is the body of POST /v1/workspaces: the
// workspace's options, with its computerd token by value. A "computerd_token"
// that is present but empty is refused (an empty token is never "no auth"),
// and so are "token_file" and the old "token": the API never reads a host
// path a caller names.
type CreateWorkspaceRequest struct {
	workspace.CreateOptions
	// ComputerdToken shadows the embedded field so an empty string given
	// explicitly can be told from an absent one.
	ComputerdToken *string `json:"computerd_token,omitempty"`
	// TokenFile and Token are refused with a 400 that says why.
	TokenFile *string `json:"token_file,omitempty"`
	Token     *string `json:"token,omitempty"`
}

// MkdirRequest is the body of POST .../fs/mkdir.
type MkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	// Mode is the permission bits; 0 means 0755.
	Mode uint32 `json:"mode,omitempty"`
}

// MoveRequest is the body of POST .../fs/mv.
type MoveRequest struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// SymlinkRequest is the body of POST .../fs/symlink.
type SymlinkRequest struct {
	Target string `json:"target"`
	Path   string `json:"path"`
}

// ChmodRequest is the body of POST .../fs/chmod.
type ChmodRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// Stream frame types (one JSON object per line).
const (
	FrameStdout   = workspace.Stdout // Data holds output bytes (exec)
	FrameStderr   = workspace.Stderr
	FrameProgress = "progress" // Progress holds the sync's totals so far
	FrameResult   = "result"   // Result holds the report; the last frame
	FrameError    = "error"    // Error and Errno; the last frame
)

// Frame is one line of an NDJSON stream (see NDJSON), of a route whose
// report is an R.
type Frame[R any] struct {
	Type     string              `json:"type"`
	Data     []byte              `json:"data,omitempty"`
	Progress *workspace.Progress `json:"progress,omitempty"`
	Result   *R                  `json:"result,omitempty"`
	// Offset is where an output frame's Data starts in the command's
	// output log (absent: 0): attach there to resume after it.
	Offset int64  `json:"offset,omitempty"`
	Error  string `json:"error,omitempty"`
	Errno  string `json:"errno,omitempty"`
}

// ExecFrame is one line of the stream POST .../exec answers with.
type ExecFrame = Frame[workspace.ExecReport]

// ExecOutputFrame is one line of the stream GET .../execs/{id}/output
// answers with: output frames, then the ExecResult.
type ExecOutputFrame = Frame[workspace.ExecResult]

// ExecStartResponse is the body of POST .../execs: the exec as recorded,
// the push before it, and a warning when the command started but the
// registry could not record it.
type ExecStartResponse = workspace.ExecStartReport

// KillRequest is the body of POST .../execs/{id}/kill: a signal by name
// ("TERM", "SIGKILL") or number; TERM when absent.
type KillRequest struct {
	Signal string `json:"signal,omitempty"`
}

// KillResponse answers a kill: the exec and the signal sent.
type KillResponse struct {
	ExecID string `json:"exec_id"`
	Signal int    `json:"signal"`
}

// Health is the body of GET /health.
type Health struct {
	Status string `json:"status"`
}
