package api

import (
	"encoding/json"
	"net/http"

	"github.com/wsync/wsync/workspace"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // the status is out; a failed write has no one to tell
}

// writeError answers err with the code and status the workspace's error
// registry gives it (workspace.APIError).
func writeError(w http.ResponseWriter, err error) {
	errno, status := workspace.APIError(err)
	if status == http.StatusTooManyRequests || errno == "EOBJECT_STORE" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, Error{Error: err.Error(), Errno: errno})
}
