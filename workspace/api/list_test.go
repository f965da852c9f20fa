package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// A listing streams (what a caller can make the server hold is
// bounded): a tree made cheaply (here 8,000 directories with long paths,
// about 17 MiB of JSON) is listed with ls -R while the server holds one
// directory's listing at a time, not the whole answer. Before, the handler
// built every entry and the whole JSON document before writing a byte.
func TestListStreams(t *testing.T) {
	e := newEnv(t, api.Options{})
	ctx := context.Background()
	s := e.store(t)
	start := time.Now()
	// Paths of about 2 KiB (eight 250-byte names) make a big answer of few
	// entries: 6 + 40 + 40*200 of them.
	const dirs, per = 40, 200
	name := func(prefix string, i int) string { return fmt.Sprintf("%s%03d%s", prefix, i, strings.Repeat("n", 246)) }
	var batch []vfs.ChangeEntry
	chain := ""
	for i := range 6 {
		chain = strings.TrimPrefix(chain+"/"+name("c", i), "/")
		batch = append(batch, vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: chain, Mode: 0o755})
	}
	for d := range dirs {
		dir := chain + "/" + name("d", d)
		batch = append(batch, vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: dir, Mode: 0o755})
		for f := range per {
			batch = append(batch, vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: dir + "/" + name("f", f), Mode: 0o755})
		}
		if _, err := s.Apply(ctx, batch, vfs.ApplyOptions{Source: vfs.Local}); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	t.Logf("tree made in %v", time.Since(start))
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	r, _ := http.NewRequest("GET", e.srv.URL+"/v1/workspaces/default/fs/ls?path=/&recursive=1&sha256=0", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read a little and stop: the handler is now blocked writing, holding
	// whatever it holds.
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	held := int64(heap()) - int64(base)
	t.Logf("heap held while the listing is mid-stream: %d KiB", held>>10)
	if held > 6<<20 {
		t.Errorf("the server holds %d MiB while streaming a listing, want one directory's worth", held>>20)
	}
	// The whole answer is the listing List gives.
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d KiB listed in %v", (len(head)+len(rest))>>10, time.Since(start))
	var got []workspace.FileInfo
	if err := json.Unmarshal(append(head, rest...), &got); err != nil {
		t.Fatal(err)
	}
	if want := 6 + dirs*(per+1); len(got) != want {
		t.Fatalf("%d entries, want %d", len(got), want)
	}
	if want := "/" + chain + "/" + name("d", 0) + "/" + name("f", 0); got[7].Path != want {
		t.Fatalf("order: entry 7 is %s", got[7].Path)
	}
}
