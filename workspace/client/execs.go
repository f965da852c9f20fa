package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"syscall"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// StartExec starts a command detached (POST .../execs) on the runtime On
// names: the server pushes, starts it and answers with its id at once; it
// follows the command from then on and makes the pull after it. The
// command outlives this call, the client and a restart of the server.
func (w *Workspace) StartExec(ctx context.Context, spec workspace.ExecSpec) (workspace.ExecStartReport, error) {
	return decoded[workspace.ExecStartReport](ctx, w, http.MethodPost, "/execs", w.onRuntime(nil), spec)
}

// Execs lists the running and recent commands of every runtime.
func (w *Workspace) Execs(ctx context.Context) (workspace.ExecList, error) {
	return decoded[workspace.ExecList](ctx, w, http.MethodGet, "/execs", nil, nil)
}

// ExecInfo describes exec id.
func (w *Workspace) ExecInfo(ctx context.Context, id string) (workspace.ExecInfo, error) {
	p, err := execPath(id)
	if err != nil {
		return workspace.ExecInfo{}, err
	}
	return decoded[workspace.ExecInfo](ctx, w, http.MethodGet, p, w.onRuntime(nil), nil)
}

// WaitExec blocks until exec id has ended (a detached one: until the pull
// after it is made or owed) and describes it then. ctx bounds the wait.
func (w *Workspace) WaitExec(ctx context.Context, id string) (workspace.ExecInfo, error) {
	p, err := execPath(id)
	if err != nil {
		return workspace.ExecInfo{}, err
	}
	return decoded[workspace.ExecInfo](ctx, w, http.MethodGet, p+"/wait", w.onRuntime(nil), nil)
}

// KillExec sends sig to exec id's process group.
func (w *Workspace) KillExec(ctx context.Context, id string, sig syscall.Signal) error {
	p, err := execPath(id)
	if err != nil {
		return err
	}
	return w.call(ctx, http.MethodPost, p+"/kill", w.onRuntime(nil), api.KillRequest{Signal: strconv.Itoa(int(sig))}, nil)
}

// AttachExec replays exec id's output from offset from
// (workspace.ExecFromEnd: none of what it wrote so far), calls out with
// each piece (its Offset set) as the stream brings it, and returns how the
// command ended. Cancelling ctx stops following; the command runs on. A
// stream that breaks is an error: attach again from the offset after the
// last piece out was given.
func (w *Workspace) AttachExec(ctx context.Context, id string, from int64, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	p, err := execPath(id)
	if err != nil {
		return workspace.ExecResult{}, err
	}
	q := w.onRuntime(url.Values{})
	if from == workspace.ExecFromEnd {
		q.Set("from", "end")
	} else {
		q.Set("from", strconv.FormatInt(from, 10))
	}
	pre, err := w.prefix()
	if err != nil {
		return workspace.ExecResult{}, err
	}
	resp, err := w.c.do(ctx, http.MethodGet, pre+p+"/output", q, nil, nil)
	if err != nil {
		return workspace.ExecResult{}, err
	}
	defer resp.Body.Close()
	return frames(resp, "exec output", nil, func(fr api.ExecOutputFrame) {
		out(workspace.ExecEvent{Stream: fr.Type, Data: fr.Data, Offset: fr.Offset})
	})
}

// execPath is the path of exec id under the workspace, the id checked
// first so a bad one never reaches a URL.
func execPath(id string) (string, error) {
	if err := workspace.ValidateExecID(id); err != nil {
		return "", err
	}
	return "/execs/" + url.PathEscape(id), nil
}
