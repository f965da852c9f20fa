package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// A write or mv that committed is answered with success and the node it
// made, even when another caller removes the path at once: the answer is
// built from what the call itself read, not from a stat after it (which
// answered 404 ENOENT for a committed write when the remove came between).
// A remover loops on the paths while writes and moves are made.
func TestCommittedMutationAnswersWithWhatItMade(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	ctx := context.Background()
	w, err := e.m.Workspace("default")
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, p := range []string{"f", "dst"} {
				if err := s.RemovePath(ctx, p, false); err != nil && !errors.Is(err, vfs.ErrNotExist) {
					t.Error(err)
					return
				}
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	// Each loop is bounded at half a second and stops at the first failure.
	repeat := func(t *testing.T, call func(body string) (int, []byte), path string, mode uint32) {
		t.Helper()
		for i, end := 0, time.Now().Add(time.Second/2); time.Now().Before(end); i++ {
			body := fmt.Sprint("content ", i)
			st, b := call(body)
			wantStatus(t, path, st, 200, b)
			var fi workspace.FileInfo
			if err := json.Unmarshal(b, &fi); err != nil {
				t.Fatal(err)
			}
			if fi.Path != path || fi.Type != "file" || fi.Size != int64(len(body)) || fi.Mode != mode || fi.Mtime.IsZero() {
				t.Fatalf("answered %s", b)
			}
		}
	}
	t.Run("write", func(t *testing.T) {
		repeat(t, func(body string) (int, []byte) {
			st, b, _ := e.req(t, "PUT", ws+"/files/f?mode=0600", strings.NewReader(body))
			return st, b
		}, "/f", 0o600)
	})
	t.Run("mv", func(t *testing.T) {
		repeat(t, func(body string) (int, []byte) {
			if _, err := s.WriteFile(ctx, "src", []byte(body), 0o640); err != nil {
				t.Fatal(err)
			}
			st, b, _ := e.req(t, "POST", ws+"/fs/mv", strings.NewReader(`{"src":"/src","dst":"/dst"}`))
			return st, b
		}, "/dst", 0o640)
	})
}

// A mode with bits outside the permission bits (07777) is refused with
// 400 EINVAL naming them, and nothing is changed: before, mkdir and chmod
// kept the low twelve bits (0170777, a stat mode with its type bits, made
// a 0777 directory; 1<<20 made a 0000 one).
func TestModeOutsidePermissionBitsRefused(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "PUT", ws+"/files/f?mode=0640", strings.NewReader("x"))
	wantStatus(t, "PUT", st, 200, b)
	for _, tc := range []struct{ mode, bits string }{
		{fmt.Sprint(0o170777), "0170000"},
		{fmt.Sprint(1 << 20), "04000000"},
		{fmt.Sprint(0o10000), "010000"},
		{"-1", "-1"},                        // not a uint32: the JSON decoder refuses it
		{fmt.Sprint(1 << 32), "4294967296"}, // nor is this
	} {
		for _, call := range []struct{ route, body string }{
			{"/fs/mkdir", `{"path":"/d","mode":` + tc.mode + `}`},
			{"/fs/chmod", `{"path":"/f","mode":` + tc.mode + `}`},
		} {
			st, b, _ := e.req(t, "POST", ws+call.route, strings.NewReader(call.body))
			wantStatus(t, call.body, st, 400, b)
			if got := errnoOf(t, b); got != "EINVAL" || !strings.Contains(string(b), tc.bits) {
				t.Errorf("%s %s: %s, want EINVAL naming %s", call.route, call.body, b, tc.bits)
			}
		}
	}
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/d", nil)
	wantStatus(t, "stat of the refused mkdir", st, 404, b)
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/f", nil)
	wantStatus(t, "stat", st, 200, b)
	var fi workspace.FileInfo
	if err := json.Unmarshal(b, &fi); err != nil || fi.Mode != 0o640 {
		t.Fatalf("after refused chmods: %s", b)
	}
	// The largest mode in range still works.
	st, b, _ = e.req(t, "POST", ws+"/fs/chmod", strings.NewReader(`{"path":"/f","mode":`+fmt.Sprint(0o7777)+`}`))
	wantStatus(t, "chmod 07777", st, 200, b)
}
