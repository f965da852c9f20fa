// Package api is the HTTP API of workspace-server, versioned under /v1/ and
// documented route by route in docs/API.md.
//
// # Auth
//
// Every route but GET /health needs "Authorization: Bearer TOKEN". The
// token is compared in constant time (both sides hashed, so not even its
// length leaks) and never logged; a refusal is 401 with errno EAUTH.
//
// # Errors
//
// Every error is a JSON body {"error": message, "errno": "ENOENT"} with a
// status that follows the errno: 404 ENOENT, 409 EEXIST and ENOTEMPTY, 400
// for bad arguments (EINVAL, ENOTDIR, EISDIR, ...), 401 EAUTH, 413 EFBIG
// (a body over the limit), 501 EOPNOTSUPP, 503 ENOTCONN (no remote), 500
// otherwise (EIO, or a sync wire code such as EPROTOCOL).
//
// # Files and sync
//
// /v1/workspaces/{ws}/files/{path...} reads (Range), writes (atomic
// replace) and deletes bytes; .../fs/* are the metadata calls. They act on
// the server store only; .../push, .../pull, .../tick and .../exec move
// changes to and from the container, through the workspace's FIFO. Exec
// answers with a stream of NDJSON frames so output is shown as it is made.
package api
