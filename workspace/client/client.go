package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// Client talks to one workspace-server.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient uses hc (whose Timeout should be zero: exec streams last
// as long as their command; bound calls with their context).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client for the server at base ("http://127.0.0.1:8080").
func New(base, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: %w: want http://HOST:PORT", base, vfs.ErrInvalid)
	}
	c := &Client{base: u, token: token, hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// url builds base + path (already escaped) + query.
func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.RawPath = u.Path + path
	p, _ := url.PathUnescape(u.RawPath)
	u.Path = p
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// do sends a request and returns the response for a 2xx status; any other
// status is decoded into an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.Error
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(b))
		if e.Error == "" {
			e.Error = resp.Status
		}
	}
	return &Error{Status: resp.StatusCode, Code: e.Errno, Message: e.Error}
}

// call sends a JSON request (nil: no body) and decodes a JSON answer into
// out (nil: discarded).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	hdr := http.Header{}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.do(ctx, method, path, q, body, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Health calls GET /health (no token needed).
func (c *Client) Health(ctx context.Context) error {
	var h api.Health
	return c.call(ctx, http.MethodGet, "/health", nil, nil, &h)
}

// Workspaces lists the server's workspaces.
func (c *Client) Workspaces(ctx context.Context) ([]workspace.Info, error) {
	var out []workspace.Info
	err := c.call(ctx, http.MethodGet, "/v1/workspaces", nil, nil, &out)
	return out, err
}

// CreateWorkspace registers a workspace. Its computerd token travels by
// value (o.ComputerdToken); the server never reads a path a caller names.
func (c *Client) CreateWorkspace(ctx context.Context, o workspace.CreateOptions) (workspace.Info, error) {
	var out workspace.Info
	err := c.call(ctx, http.MethodPost, "/v1/workspaces", nil, o, &out)
	return out, err
}

// Workspace is a client scoped to one workspace, and to one of its
// runtimes for the calls that sync with one (On).
type Workspace struct {
	c       *Client
	name    string
	runtime string // "": the default runtime
}

// Workspace returns the client of workspace name. The name is checked here,
// so a bad one fails before it reaches a URL.
func (c *Client) Workspace(name string) *Workspace { return &Workspace{c: c, name: name} }

// Name is the workspace's name.
func (w *Workspace) Name() string { return w.name }

// On returns the workspace's client whose push, pull, exec, verify,
// repair and status calls go to the runtime named runtime ("" or
// "default": the default runtime). Tick syncs every runtime either way.
func (w *Workspace) On(runtime string) *Workspace {
	c := *w
	c.runtime = runtime
	return &c
}

// onRuntime adds the runtime On named to a call's query.
func (w *Workspace) onRuntime(q url.Values) url.Values {
	if w.runtime == "" || w.runtime == workspace.DefaultRuntime {
		return q
	}
	if q == nil {
		q = url.Values{}
	}
	q.Set("runtime", w.runtime)
	return q
}

// Runtimes lists the workspace's runtimes, the default one first.
func (w *Workspace) Runtimes(ctx context.Context) ([]workspace.Runtime, error) {
	return decoded[[]workspace.Runtime](ctx, w, http.MethodGet, "/runtimes", nil, nil)
}

// Attach attaches a runtime. Its computerd token travels by value
// (o.ComputerdToken); the server never echoes it.
func (w *Workspace) Attach(ctx context.Context, o workspace.AttachOptions) (workspace.Runtime, error) {
	return decoded[workspace.Runtime](ctx, w, http.MethodPost, "/runtimes", nil, o)
}

// Detach detaches the runtime named name.
func (w *Workspace) Detach(ctx context.Context, name string) error {
	if err := workspace.ValidateRuntimeName(name); err != nil {
		return err
	}
	return w.call(ctx, http.MethodDelete, "/runtimes/"+name, nil, nil, nil)
}

func (w *Workspace) prefix() (string, error) {
	if err := workspace.ValidateName(w.name); err != nil {
		return "", err
	}
	return "/v1/workspaces/" + w.name, nil
}

func (w *Workspace) call(ctx context.Context, method, sub string, q url.Values, in, out any) error {
	p, err := w.prefix()
	if err != nil {
		return err
	}
	return w.c.call(ctx, method, p+sub, q, in, out)
}

// filesURL is the escaped files route of a workspace path.
func (w *Workspace) filesURL(path string) (string, error) {
	p, err := w.prefix()
	if err != nil {
		return "", err
	}
	sp, err := vfs.CleanAPIPath(path)
	if err != nil {
		return "", err
	}
	segs := strings.Split(sp, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return p + "/files/" + strings.Join(segs, "/"), nil
}

// Info returns the workspace's registration.
func (w *Workspace) Info(ctx context.Context) (workspace.Config, error) {
	return decoded[workspace.Config](ctx, w, http.MethodGet, "", nil, nil)
}

// Open streams a file's bytes. The caller closes the reader.
func (w *Workspace) Open(ctx context.Context, path string) (io.ReadCloser, error) {
	return w.OpenRange(ctx, path, 0, -1)
}

// OpenRange streams n bytes of a file from off (n < 0: to the end), with an
// HTTP Range request.
func (w *Workspace) OpenRange(ctx context.Context, path string, off, n int64) (io.ReadCloser, error) {
	u, err := w.filesURL(path)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	switch {
	case n == 0:
		return io.NopCloser(strings.NewReader("")), nil
	case off > 0 && n < 0:
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", off))
	case n > 0:
		hdr.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	resp, err := w.c.do(ctx, http.MethodGet, u, nil, nil, hdr)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(strings.NewReader("")), nil // a range past the end reads nothing
		}
		return nil, err
	}
	return resp.Body, nil
}

// ReadFile returns a whole file.
func (w *Workspace) ReadFile(ctx context.Context, path string) ([]byte, error) {
	rc, err := w.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// WriteFile replaces (or creates) a file with r's bytes, atomically. A nil
// mode keeps an existing file's mode (0644 for a new one).
func (w *Workspace) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) (workspace.FileInfo, error) {
	var fi workspace.FileInfo
	u, err := w.filesURL(path)
	if err != nil {
		return fi, err
	}
	if u == "" || strings.HasSuffix(u, "/files/") {
		return fi, fmt.Errorf("write /: %w", vfs.ErrIsDir)
	}
	q := url.Values{}
	if mode != nil {
		q.Set("mode", strconv.FormatUint(uint64(*mode), 8))
	}
	resp, err := w.c.do(ctx, http.MethodPut, u, q, r, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return fi, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&fi)
	return fi, err
}

// Remove removes a node; a non-empty directory needs recursive.
func (w *Workspace) Remove(ctx context.Context, path string, recursive bool) error {
	u, err := w.filesURL(path)
	if err != nil {
		return err
	}
	q := url.Values{}
	if recursive {
		q.Set("recursive", "1")
	}
	return w.c.call(ctx, http.MethodDelete, u, q, nil, nil)
}

// Stat returns one node; withHash computes a file's sha256 on the server.
func (w *Workspace) Stat(ctx context.Context, path string, withHash bool) (workspace.FileInfo, error) {
	return decoded[workspace.FileInfo](ctx, w, http.MethodGet, "/fs/stat", url.Values{"path": {path}, "sha256": {strconv.FormatBool(withHash)}}, nil)
}

// List lists a directory (recursive: the subtree, depth first).
func (w *Workspace) List(ctx context.Context, path string, recursive, withHash bool) ([]workspace.FileInfo, error) {
	q := url.Values{"path": {path}, "sha256": {strconv.FormatBool(withHash)}, "recursive": {strconv.FormatBool(recursive)}}
	return decoded[[]workspace.FileInfo](ctx, w, http.MethodGet, "/fs/ls", q, nil)
}

// Mkdir makes a directory (parents: mkdir -p). Mode 0 is 0755.
func (w *Workspace) Mkdir(ctx context.Context, path string, mode uint32, parents bool) (workspace.FileInfo, error) {
	return decoded[workspace.FileInfo](ctx, w, http.MethodPost, "/fs/mkdir", nil, api.MkdirRequest{Path: path, Parents: parents, Mode: mode})
}

// Rename moves src to dst.
func (w *Workspace) Rename(ctx context.Context, src, dst string) (workspace.FileInfo, error) {
	return decoded[workspace.FileInfo](ctx, w, http.MethodPost, "/fs/mv", nil, api.MoveRequest{Src: src, Dst: dst})
}

// Symlink makes a symlink at path pointing to target.
func (w *Workspace) Symlink(ctx context.Context, target, path string) (workspace.FileInfo, error) {
	return decoded[workspace.FileInfo](ctx, w, http.MethodPost, "/fs/symlink", nil, api.SymlinkRequest{Target: target, Path: path})
}

// Chmod sets permission bits.
func (w *Workspace) Chmod(ctx context.Context, path string, mode uint32) (workspace.FileInfo, error) {
	return decoded[workspace.FileInfo](ctx, w, http.MethodPost, "/fs/chmod", nil, api.ChmodRequest{Path: path, Mode: mode})
}

// Push pushes the server's changes to the container. With an observer on
// ctx (workspace.WithProgress) the server streams the push's progress
// (its snapshot bootstrap first, for an empty container), and the
// observer hears it as batches commit.
func (w *Workspace) Push(ctx context.Context) (workspace.SyncReport, error) {
	return synced[workspace.SyncReport](ctx, w, "/push", w.onRuntime(nil))
}

// Pull pulls the container's changes (and retries a pending pull),
// telling the observer on ctx, if any, as batches commit (see Push).
func (w *Workspace) Pull(ctx context.Context) (workspace.SyncReport, error) {
	return synced[workspace.SyncReport](ctx, w, "/pull", w.onRuntime(nil))
}

// PullWith is Pull with opts: AllowMassDelete confirms a pull the
// deletion safety paused; MassDelete replaces the server's bounds for
// this pull.
func (w *Workspace) PullWith(ctx context.Context, opts workspace.PullOptions) (workspace.SyncReport, error) {
	q := url.Values{}
	if opts.AllowMassDelete {
		q.Set("allow_mass_delete", "1")
	}
	if opts.MassDelete.Share != 0 {
		q.Set("mass_delete_share", strconv.FormatFloat(opts.MassDelete.Share, 'g', -1, 64))
	}
	if opts.MassDelete.Min != 0 {
		q.Set("mass_delete_min", strconv.Itoa(opts.MassDelete.Min))
	}
	return synced[workspace.SyncReport](ctx, w, "/pull", w.onRuntime(q))
}

// TrashList lists the versions in the trash at path or below it ("" or
// "/": all), newest first, at most limit (0: the server's bound).
func (w *Workspace) TrashList(ctx context.Context, path string, limit int) ([]workspace.TrashEntry, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return decoded[[]workspace.TrashEntry](ctx, w, http.MethodGet, "/trash", q, nil)
}

// TrashRestore brings req.Path back from the trash, with what it held.
func (w *Workspace) TrashRestore(ctx context.Context, req workspace.RestoreRequest) (workspace.RestoreReport, error) {
	return decoded[workspace.RestoreReport](ctx, w, http.MethodPost, "/trash/restore", nil, req)
}

// TrashPurge deletes the versions at path or below it trashed more than
// olderThan ago (0: all).
func (w *Workspace) TrashPurge(ctx context.Context, path string, olderThan time.Duration) (workspace.PurgeReport, error) {
	return decoded[workspace.PurgeReport](ctx, w, http.MethodPost, "/trash/purge", nil, api.PurgeRequest{Path: path, OlderThan: olderThan})
}

// Tick pulls from every runtime, then pushes to every runtime, telling
// the observer on ctx, if any, of each (see Push).
func (w *Workspace) Tick(ctx context.Context) (workspace.TickReport, error) {
	return synced[workspace.TickReport](ctx, w, "/tick", nil)
}

// Status reports the workspace's sync state.
func (w *Workspace) Status(ctx context.Context) (workspace.Status, error) {
	return decoded[workspace.Status](ctx, w, http.MethodGet, "/status", w.onRuntime(nil), nil)
}

// Verify asks for a convergence verdict. (It moves nothing: an observer
// on ctx hears nothing.)
func (w *Workspace) Verify(ctx context.Context) (workspace.VerifyReport, error) {
	return synced[workspace.VerifyReport](ctx, w, "/verify", w.onRuntime(nil))
}

// Repair is verify --repair: the remote repairs the drift it finds and the
// verdict after the repair comes back. The observer on ctx, if any, hears
// the batches the repair moves (see Push).
func (w *Workspace) Repair(ctx context.Context) (workspace.VerifyReport, error) {
	return synced[workspace.VerifyReport](ctx, w, "/verify", w.onRuntime(url.Values{"repair": {"1"}}))
}

// Conflicts lists the workspace's newest open conflicts, newest first;
// all adds the resolved ones; at most limit (0: the server's default,
// workspace.DefaultConflictList).
func (w *Workspace) Conflicts(ctx context.Context, all bool, limit int) ([]workspace.ConflictInfo, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return decoded[[]workspace.ConflictInfo](ctx, w, http.MethodGet, "/conflicts", q, nil)
}

// ResolveConflict settles the newest open conflict at path keeping keep's
// version ("server", "container" or "both") and returns the settled record.
func (w *Workspace) ResolveConflict(ctx context.Context, path, keep string) (workspace.ConflictInfo, error) {
	return decoded[workspace.ConflictInfo](ctx, w, http.MethodPost, "/conflicts/resolve", nil, api.ResolveRequest{Path: path, Keep: keep})
}

// SetConflictPolicy changes the workspace's conflict policy and returns
// the policy now in force. (Info shows the current one.)
func (w *Workspace) SetConflictPolicy(ctx context.Context, policy string) (vfs.ConflictPolicy, error) {
	p, err := decoded[api.ConflictPolicy](ctx, w, http.MethodPut, "/conflict-policy", nil, api.ConflictPolicy{Policy: policy})
	return vfs.ConflictPolicy(p.Policy), err
}

// Quota returns the workspace's quota and usage.
func (w *Workspace) Quota(ctx context.Context) (workspace.QuotaStatus, error) {
	return decoded[workspace.QuotaStatus](ctx, w, http.MethodGet, "/quota", nil, nil)
}

// SetQuota replaces the workspace's quota (zero fields: unbounded) and
// returns the quota now in force with the usage.
func (w *Workspace) SetQuota(ctx context.Context, q vfs.Quota) (workspace.QuotaStatus, error) {
	return decoded[workspace.QuotaStatus](ctx, w, http.MethodPut, "/quota", nil, q)
}

// decoded makes a call and returns its answer, decoded.
func decoded[T any](ctx context.Context, w *Workspace, method, path string, q url.Values, body any) (T, error) {
	var v T
	err := w.call(ctx, method, path, q, body, &v)
	return v, err
}

// synced makes a sync call (POST path) and returns its report. With an
// observer on ctx it asks for the NDJSON stream and tells the observer
// each progress frame; without one (or from a server that answers plain
// JSON) it reads the report alone.
func synced[R any](ctx context.Context, w *Workspace, path string, q url.Values) (R, error) {
	obs := workspace.ProgressOf(ctx)
	if obs == nil {
		return decoded[R](ctx, w, http.MethodPost, path, q, nil)
	}
	var rep R
	p, err := w.prefix()
	if err != nil {
		return rep, err
	}
	resp, err := w.c.do(ctx, http.MethodPost, p+path, q, nil, http.Header{"Accept": {api.NDJSON}})
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	if !isNDJSON(resp) {
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			return rep, fmt.Errorf("POST %s: decode answer: %w", path, err)
		}
		return rep, nil
	}
	return frames[R](resp, path, obs, nil)
}

func isNDJSON(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == api.NDJSON
}

// frames reads an NDJSON stream up to its result frame, whose report it
// returns (an error frame is an *Error). Progress frames go to obs (nil:
// dropped), output frames to out; frames of other types are skipped.
func frames[R any](resp *http.Response, what string, obs func(workspace.Progress), out func(api.Frame[R])) (R, error) {
	var rep R
	dec := json.NewDecoder(resp.Body)
	for {
		var fr api.Frame[R]
		if err := dec.Decode(&fr); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return rep, fmt.Errorf("%s stream: %w", what, err)
		}
		switch fr.Type {
		case api.FrameProgress:
			if obs != nil && fr.Progress != nil {
				obs(*fr.Progress)
			}
		case api.FrameStdout, api.FrameStderr:
			if out != nil {
				out(fr)
			}
		case api.FrameResult:
			if fr.Result == nil {
				return rep, fmt.Errorf("%s stream: %w: result frame without a result", what, vfs.ErrInvalid)
			}
			return *fr.Result, nil
		case api.FrameError:
			return rep, &Error{Status: resp.StatusCode, Code: fr.Errno, Message: fr.Error}
		}
	}
}

// Exec runs the exec bracket on the server (push, command, pull). out is
// called with each piece of output as the stream brings it; with a nil out
// the output is collected in the report's Events. An observer on ctx
// (workspace.WithProgress) hears the progress of the push before the
// command and of the pull after it. The error is non-nil when the command
// could not run (the push failed, say) or the stream broke; a non-zero
// exit is in the report, not an error.
func (w *Workspace) Exec(ctx context.Context, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecReport, error) {
	var rep workspace.ExecReport
	p, err := w.prefix()
	if err != nil {
		return rep, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return rep, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}}
	obs := workspace.ProgressOf(ctx)
	if obs != nil {
		hdr.Set("Accept", api.NDJSON)
	}
	resp, err := w.c.do(ctx, http.MethodPost, p+"/exec", w.onRuntime(nil), bytes.NewReader(b), hdr)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	var events []workspace.ExecEvent
	rep, err = frames(resp, "exec", obs, func(fr api.ExecFrame) {
		ev := workspace.ExecEvent{Stream: fr.Type, Data: fr.Data, Offset: fr.Offset}
		if out != nil {
			out(ev)
		} else {
			events = append(events, ev)
		}
	})
	if err != nil {
		return rep, err
	}
	rep.Events = events
	return rep, nil
}
