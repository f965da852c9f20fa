package tests

import (
	"database/sql"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/vfs"
)

// TestCrashDuringSnapshotHold SIGKILLs computerd inside vfs.Store.HoldChunks
// while a snapshot bootstraps its empty store: before the hold commits
// (vfs.holds.commit: the stage's records written into the packs and
// synced, the holds not committed) and after (vfs.holds.committed: the
// objects call not answered), at the first hold and at the second. The
// restart keeps what was held and nothing else: the resumed bootstrap sends
// again exactly the chunks no committed hold named; the install shows the
// whole tree, byte for byte, with the roots equal and nothing left for the
// next push; once the staging is gone no hold is left, every chunk row
// counts exactly the manifests that name it, and after the collection of a
// start every pack has a live record and is at most half dead (GC's rule),
// the dead bytes being at most the records the crash cut off. A crash past
// a hold's commit cuts off records too: the snapshot's writer goes on
// writing the next stage while a hold commits (converge's holdFor), so what
// it wrote past the held stage is dead after the restart; the bootstrap
// sends it again.
func TestCrashDuringSnapshotHold(t *testing.T) {
	for _, sc := range []struct {
		point string
		hit   int
	}{
		{"vfs.holds.commit", 1},
		{"vfs.holds.commit", 2},
		{"vfs.holds.committed", 1},
		{"vfs.holds.committed", 2},
	} {
		t.Run(fmt.Sprintf("%s:%d", sc.point, sc.hit), func(t *testing.T) {
			p := newPair(t, pairOpts{separate: "disk"})
			m := writeHoldTree(t, apiSide{t: t, c: p.client()}, rand.New(rand.NewPCG(7, 0x401d)))
			first := p.sync("push")

			env := crashpoint.Env + "=" + sc.point + ":" + strconv.Itoa(sc.hit)
			victim := p.restartArmed("computerd", "install", env)
			r := p.cli("", "push")
			t.Logf("push during the crash: exit %d %s", r.code, strings.TrimSpace(r.stderr))
			select {
			case <-victim.done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("computerd never reached %s:%d", sc.point, sc.hit)
			}
			if want := "crashpoint: " + sc.point + " hit"; !strings.Contains(victim.output(), want) {
				t.Fatalf("computerd died (%v) but not at %q:\n%s", victim.err, want, victim.output())
			}

			syscallUnmount(p.mount)
			p.startComputerd()
			held := countRows(t, p.cdState, `SELECT count(*) FROM chunk_holds`)
			if sc.point == "vfs.holds.commit" && sc.hit == 1 && held != 0 {
				t.Errorf("%d chunks held after a crash before the first hold committed, want 0", held)
			}
			if (sc.point == "vfs.holds.committed" || sc.hit > 1) && held == 0 {
				t.Errorf("no chunk held after a crash past a committed hold")
			}
			resumed := p.sync("push")
			t.Logf("bootstrap: %d chunks; %d held at the restart; the resumed one sent %d chunks (%d bytes)",
				first.Objects, held, resumed.Objects, resumed.Bytes)
			if want := first.Objects - int(held); resumed.Objects != want {
				t.Errorf("the resumed bootstrap sent %d chunks, want %d (%d less the %d held)", resumed.Objects, want, first.Objects, held)
			}

			m.check(t, "container after the resumed bootstrap", mountTree(t, p.mount))
			if fi, err := os.Stat(p.cdState + ".snapshot"); err == nil {
				t.Errorf("staging still on disk after the install (%d bytes)", fi.Size())
			}
			if n := countRows(t, p.cdState, `SELECT count(*) FROM chunk_holds`); n != 0 {
				t.Errorf("%d holds left after the install removed the staging", n)
			}
			if rep := p.sync("push"); rep.Entries != 0 || rep.Objects != 0 {
				t.Errorf("push after the install applied %d entries and %d chunks, want none", rep.Entries, rep.Objects)
			}
			if r := p.cli("", "verify"); r.code != 0 {
				t.Errorf("verify after recovery: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			m.check(t, "server", serverTree(t, p.client()))

			// The collection of a start (GC at open, no grace), then the
			// store as it rests.
			p.cd.stop(15)
			syscallUnmount(p.mount)
			p.startComputerd()
			m.check(t, "container after another start", mountTree(t, p.mount))
			p.cd.stop(15)
			syscallUnmount(p.mount)
			dead := checkChunkStore(t, p.cdState)
			t.Logf("dead pack bytes after GC: %d", dead)
			if dead > resumed.Bytes+int64(resumed.Objects)*packRecordHeader {
				t.Errorf("%d dead pack bytes, more than the %d bytes the crash made the bootstrap send again", dead, resumed.Bytes)
			}
		})
	}
}

// writeHoldTree writes a tree whose snapshot holds its chunks in more than
// one HoldChunks call (converge holds every 16 MiB received): 2,500 files
// of 8-16 KiB (pack records), 400 of at most 4 KiB (rows) and two of
// 1.2 MiB (chunk files and a pack record each).
func writeHoldTree(t *testing.T, s fsSide, rng *rand.Rand) treeModel {
	t.Helper()
	m := treeModel{}
	put := func(p string, n int) {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s.write(p, b)
		m[p] = "file:" + sum(b)
	}
	for _, d := range []string{"/small", "/big", "/packed"} {
		s.mkdir(d)
		m[d] = "dir"
	}
	for i := range 25 {
		d := fmt.Sprintf("/packed/d%02d", i)
		s.mkdir(d)
		m[d] = "dir"
		for j := range 100 {
			put(fmt.Sprintf("%s/f%03d", d, j), 8<<10+rng.IntN(8<<10))
		}
	}
	for i := range 400 {
		put(fmt.Sprintf("/small/f%03d", i), 1+rng.IntN(4<<10-1))
	}
	for i := range 2 {
		put(fmt.Sprintf("/big/f%d", i), 1200<<10)
	}
	return m
}

// packRecordHeader is the length of a pack record's header
// (chunkstore/packs.go): a pack's live bytes are its rows' sizes plus one
// header each.
const packRecordHeader = 40

// openStoreDB opens a store's database for reading alongside (or after)
// its daemon.
func openStoreDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func countRows(t *testing.T, path, query string) int64 {
	t.Helper()
	var n int64
	if err := openStoreDB(t, path).QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkChunkStore checks a resting store's chunks (its daemon stopped):
// no hold; every row's reference count is the number of times the
// manifests (live files and trash) name it, none unreferenced; every
// chunk file has its row and no temp file is left; every pack has a live
// record and is at most half dead. It returns the packs' dead bytes.
func checkChunkStore(t *testing.T, path string) (dead int64) {
	t.Helper()
	db := openStoreDB(t, path)
	var holds int64
	if err := db.QueryRow(`SELECT count(*) FROM chunk_holds`).Scan(&holds); err != nil {
		t.Fatal(err)
	}
	if holds != 0 {
		t.Errorf("%d chunk holds left in a store with no staging", holds)
	}

	want := map[chunkstore.Hash]int64{}
	for _, table := range []string{"nodes", "trash"} {
		rows, err := db.Query(`SELECT manifest FROM `+table+` WHERE kind = ? AND length(manifest) > 0`, int(vfs.KindFile))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			man, _, err := chunkstore.DecodeManifest(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range man.DataRefs() {
				want[r.Hash]++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}

	live := map[int64]int64{} // pack id: bytes its rows name
	files := map[string]bool{}
	rows, err := db.Query(`SELECT hash, refs, size, pack, data IS NULL FROM chunks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bad := 0
	for rows.Next() {
		var hb []byte
		var refs, size int64
		var pack sql.NullInt64
		var noData bool
		if err := rows.Scan(&hb, &refs, &size, &pack, &noData); err != nil {
			t.Fatal(err)
		}
		h := chunkstore.Hash(hb)
		if n := want[h]; refs != n && bad < 10 {
			bad++
			t.Errorf("chunk %s: refs %d, the manifests name it %d times", h, refs, n)
		}
		delete(want, h)
		switch {
		case pack.Valid:
			live[pack.Int64] += packRecordHeader + size
		case noData:
			files[h.String()] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for h, n := range want {
		t.Errorf("chunk %s: named %d times by the manifests, no row", h, n)
	}

	dir := path + ".chunks"
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if pdir, name := filepath.Split(rel); pdir == "packs/" {
			id, err := strconv.ParseInt(strings.TrimSuffix(name, ".pack"), 10, 64)
			if err != nil {
				t.Errorf("unexpected file %s", rel)
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n := live[id]
			switch {
			case n == 0:
				t.Errorf("pack %s (%d bytes) has no live record after GC", name, fi.Size())
			case fi.Size()-n > fi.Size()/2:
				t.Errorf("pack %s: %d of %d bytes dead after GC, more than half", name, fi.Size()-n, fi.Size())
			}
			delete(live, id)
			dead += fi.Size() - n
			return nil
		}
		if !files[d.Name()] {
			t.Errorf("chunk file %s without a row after GC", rel)
		}
		delete(files, d.Name())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id := range live {
		t.Errorf("rows name pack %d, which is not on disk", id)
	}
	for h := range files {
		t.Errorf("chunk %s: its row names a file that is not on disk", h)
	}
	return dead
}
