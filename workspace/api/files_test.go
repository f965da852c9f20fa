package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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
	s := e.store(t)
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

// A name that is not valid UTF-8 (made in the container: Linux takes any
// bytes but '/' and NUL) cannot travel in a JSON string: "path" shows each
// bad byte as U+FFFD, which names another file. Such an entry carries
// "path_bytes", the path's exact bytes in base64, and the URL routes take
// those bytes percent-encoded, so a listing gives a client what it needs
// to reach the file. A symlink's target likewise ("target_bytes"). Before,
// nothing in the answer told such a file from one named with U+FFFD.
func TestNonUTF8NameListedWithItsBytes(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	ctx := context.Background()
	s := e.store(t)
	// What a sync from the container leaves in the store.
	if err := s.MkdirPath(ctx, "d\xfe", 0o755, false); err != nil {
		t.Fatal(err)
	}
	for p, data := range map[string]string{"d\xfe/a\xff": "odd", "a\ufffd": "the name the lossy path shows"} {
		if _, err := s.WriteFile(ctx, p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SymlinkPath(ctx, "t\xff", "l"); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	st, b, _ := e.req(t, "GET", ws+"/fs/ls?path=/&recursive=1&sha256=0", nil)
	wantStatus(t, "ls -R", st, 200, b)
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"path": "/a\ufffd"},
		{"path": "/d\ufffd", "path_bytes": b64([]byte("/d\xfe"))},
		{"path": "/d\ufffd/a\ufffd", "path_bytes": b64([]byte("/d\xfe/a\xff"))},
		{"path": "/l", "target": "t\ufffd", "target_bytes": b64([]byte("t\xff"))},
	}
	if len(got) != len(want) {
		t.Fatalf("ls -R: %s", b)
	}
	for i, w := range want {
		for _, k := range []string{"path", "path_bytes", "target_bytes"} {
			if v, ok := got[i][k]; w[k] != "" && v != w[k] || w[k] == "" && ok {
				t.Errorf("entry %d: %s = %v, want %q", i, k, v, w[k])
			}
		}
	}
	// The bytes, percent-encoded, reach the file.
	raw, err := base64.StdEncoding.DecodeString(want[2]["path_bytes"])
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for seg := range strings.SplitSeq(strings.TrimPrefix(string(raw), "/"), "/") {
		segs = append(segs, url.PathEscape(seg))
	}
	st, b, _ = e.req(t, "GET", ws+"/files/"+strings.Join(segs, "/"), nil)
	wantStatus(t, "GET by the bytes", st, 200, b)
	if string(b) != "odd" {
		t.Fatalf("GET by the bytes: %q", b)
	}
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path="+url.QueryEscape(string(raw)), nil)
	wantStatus(t, "stat by the bytes", st, 200, b)
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil || obj["path_bytes"] != want[2]["path_bytes"] {
		t.Fatalf("stat by the bytes: %s", b)
	}
	st, b, _ = e.req(t, "DELETE", ws+"/files/"+strings.Join(segs, "/"), nil)
	wantStatus(t, "DELETE by the bytes", st, 204, b)
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path="+url.QueryEscape("/a\ufffd"), nil)
	wantStatus(t, "the file named with U+FFFD is another", st, 200, b)
}

// A JSON body that is not UTF-8 is refused, and nothing is made: the
// decoder turned each bad byte into U+FFFD, so a mkdir of "a\xff" made
// "a\uFFFD", another name than the one asked for.
func TestBodyNotUTF8Refused(t *testing.T) {
	e := newEnv(t, api.Options{})
	ws := "/v1/workspaces/default"
	st, b, _ := e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader("{\"path\":\"/a\xff\"}"))
	if st != 400 || !strings.Contains(string(b), "EINVAL") {
		t.Errorf("mkdir with a body that is not UTF-8: %d %s, want 400 EINVAL", st, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/fs/ls?path=/", nil)
	if st != 200 || strings.Contains(string(b), `"/a`) {
		t.Errorf("after the refused mkdir, ls /: %d %s, want no /a...", st, b)
	}
}
