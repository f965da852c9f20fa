package workspace_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

func TestPatternsAddTheIgnoreFile(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	w, err := h.m.Create(ctx, workspace.CreateOptions{Name: "web", Endpoint: "ws://127.0.0.1:1/sync", Ignore: []string{"dist/", "*.log", "!keep.log"}})
	must(t, err)
	_, err = w.WriteFile(ctx, "/.wsyncignore", strings.NewReader("# scratch\ntmp/\n\n"), nil)
	must(t, err)
	got, err := w.Patterns(ctx)
	must(t, err)
	if want := []string{"dist/", "*.log", "!keep.log", "tmp/"}; !slices.Equal(got, want) {
		t.Errorf("patterns = %q, want %q", got, want)
	}
	// Through the files API: a directory-only pattern needs the path's kind.
	if err := w.Mkdir(ctx, "/dist", 0, false); !errors.Is(err, workspace.ErrIgnored) {
		t.Errorf("mkdir /dist: %v, want ErrIgnored", err)
	}
	if _, err := w.WriteFile(ctx, "/dist", strings.NewReader("a file named dist"), nil); err != nil {
		t.Errorf("a file named dist is not ignored by dist/: %v", err)
	}
	if _, err := w.WriteFile(ctx, "/keep.log", strings.NewReader("k"), nil); err != nil {
		t.Errorf("!keep.log: %v", err)
	}
	if _, err := w.WriteFile(ctx, "/tmp/x", strings.NewReader("t"), nil); !errors.Is(err, workspace.ErrIgnored) {
		t.Errorf("/tmp/x under the file's tmp/: %v, want ErrIgnored", err)
	}
	// The files API refuses an ignore file it would not use whole; a list
	// with a bad pattern too.
	if _, err := w.WriteFile(ctx, "/.wsyncignore", strings.NewReader("ok/\nsrc/[z-\n"), nil); !errors.Is(err, vfs.ErrInvalid) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad .wsyncignore: %v, want EINVAL naming line 2", err)
	}
	if _, err := w.SetIgnore(ctx, []string{"[a-"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("SetIgnore of a bad pattern: %v", err)
	}
	// SetIgnore persists: a reopened manager has the new list.
	got, err = w.SetIgnore(ctx, []string{})
	must(t, err)
	if want := []string{"tmp/"}; !slices.Equal(got, want) {
		t.Errorf("after SetIgnore([]): %q, want %q", got, want)
	}
	h.m.Close()
	m := h.open(t)
	w2, err := m.Workspace("web")
	must(t, err)
	if got := w2.IgnoreList(); got == nil || len(got) != 0 {
		t.Errorf("reopened list = %#v, want []", got)
	}
}
