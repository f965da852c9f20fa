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
