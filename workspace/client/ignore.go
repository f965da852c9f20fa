package client

import (
	"context"
	"net/http"

	"github.com/wsync/wsync/workspace/api"
)

// Ignore returns the workspace's configured ignore patterns and the
// patterns in force (GET .../ignore).
func (w *Workspace) Ignore(ctx context.Context) (api.Ignore, error) {
	return decoded[api.Ignore](ctx, w, http.MethodGet, "/ignore", nil, nil)
}

// SetIgnore replaces the workspace's configured ignore patterns (nil: the
// default, empty: none) and returns the patterns now in force (PUT
// .../ignore).
func (w *Workspace) SetIgnore(ctx context.Context, patterns []string) (api.Ignore, error) {
	return decoded[api.Ignore](ctx, w, http.MethodPut, "/ignore", nil, api.Ignore{Ignore: patterns})
}
