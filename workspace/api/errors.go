package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// Codes of errors raised by the HTTP layer itself.
const (
	ErrnoAuth     = "EAUTH" // missing or wrong bearer token
	ErrnoTooLarge = "EFBIG" // request body over the limit
)

// statusOf maps an errno name to the HTTP status of the response.
func statusOf(errno string) int {
	switch errno {
	case "ENOENT":
		return http.StatusNotFound
	case "EEXIST", "ENOTEMPTY":
		return http.StatusConflict
	case "EINVAL", "ENOTDIR", "EISDIR", "ENAMETOOLONG", "ELOOP", "ERANGE":
		return http.StatusBadRequest
	case "EPERM", "EACCES":
		return http.StatusForbidden
	case "EPENDING":
		return http.StatusConflict
	case "EBUSY", "EEXEC_BUSY":
		return http.StatusTooManyRequests
	case ErrnoAuth:
		return http.StatusUnauthorized
	case ErrnoTooLarge:
		return http.StatusRequestEntityTooLarge
	case "EOPNOTSUPP":
		return http.StatusNotImplemented
	case "ENOTCONN", "ESHUTDOWN":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errnoOf names err's code for the response.
func errnoOf(err error) string {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return ErrnoTooLarge
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ECANCELED"
	}
	return workspace.ErrnoName(err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // the status is out; a failed write has no one to tell
}

func writeError(w http.ResponseWriter, err error) {
	errno := errnoOf(err)
	status := statusOf(errno)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, Error{Error: err.Error(), Errno: errno})
}
