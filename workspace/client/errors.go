package client

import (
	"fmt"

	"github.com/wsync/wsync/workspace"
)

// Sentinels for errors the HTTP layer raises (the workspace's, kept here
// for the client's users).
var (
	ErrUnauthorized = workspace.ErrUnauthorized
	ErrTooLarge     = workspace.ErrTooLarge
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

// Unwrap returns the sentinel of the code in the workspace's error
// registry (workspace.APISentinel), so errors.Is works across the API.
func (e *Error) Unwrap() error { return workspace.APISentinel(e.Code, e.Status) }
