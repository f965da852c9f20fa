package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mountSubtree describes the container's tree under dir (its mount) as ls
// --json -R does the server's: path -> type, mode, content hash or target.
func mountSubtree(t *testing.T, root, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		mode := uint32(fi.Mode().Perm())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out["/"+rel] = "symlink " + target
		case fi.IsDir():
			out["/"+rel] = fmt.Sprintf("dir %o", mode)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out["/"+rel] = fmt.Sprintf("file %o %s", mode, hex.EncodeToString(sum[:]))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// serverTree is mountTree of the server's store, through ls --json -R.
func (p *pair) serverTree(dir string) map[string]string {
	p.t.Helper()
	out := map[string]string{}
	r := p.cli("", "stat", "--json", dir)
	if r.code != 0 {
		return out
	}
	var top fileInfo
	if err := json.Unmarshal([]byte(r.stdout), &top); err != nil {
		p.t.Fatal(err)
	}
	for _, fi := range append([]fileInfo{top}, p.ls(dir, true)...) {
		switch fi.Type {
		case "symlink":
			out[fi.Path] = "symlink " + fi.Target
		case "dir":
			out[fi.Path] = fmt.Sprintf("dir %o", fi.Mode)
		default:
			out[fi.Path] = fmt.Sprintf("file %o %s", fi.Mode, fi.Sha256)
		}
	}
	return out
}

type trashEntry struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Op   string `json:"op"`
	By   string `json:"origin"`
}

func (p *pair) trashList(path string) []trashEntry {
	p.t.Helper()
	var out []trashEntry
	if err := json.Unmarshal([]byte(p.ok("trash", "ls", "--json", path)), &out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// rm -rf src in the container comes to the server as a pull of deletes;
// every file goes to the server's trash, and trash restore /src brings
// the subtree back, content and modes, on the server and, after the
// push, in the container's mount.
func TestTrashRestoreBringsBackAnRmRfOnBothSides(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`set -e
mkdir -p src/sub/deep
echo 'package main' > src/main.go
printf '#!/bin/sh\necho hi\n' > src/sub/run.sh && chmod 755 src/sub/run.sh
seq 1 300000 > src/sub/deep/big       # about 2 MB: several chunks
echo secret > src/sub/key && chmod 600 src/sub/key
: > src/empty
ln -s sub/run.sh src/link
chmod 750 src && chmod 700 src/sub && chmod 711 src/sub/deep`)
	before := p.serverTree("/src")
	if len(before) != 9 {
		t.Fatalf("server tree before: %d paths %v", len(before), before)
	}
	if mt := mountSubtree(t, p.mount, "src"); !maps.Equal(mt, before) {
		t.Fatalf("the sides differ before the test:\nserver    %v\ncontainer %v", before, mt)
	}

	p.ok("exec", "--", "rm", "-rf", "src")
	if _, ok := p.stat("/src"); ok {
		t.Fatal("/src is still on the server after rm -rf in the container")
	}
	trashed := p.trashList("/src")
	if len(trashed) != len(before) {
		t.Fatalf("the trash holds %d entries under /src, want %d: %+v", len(trashed), len(before), trashed)
	}
	for _, e := range trashed {
		if e.Op != "delete" || e.By != "sync" {
			t.Errorf("trash entry %+v: want a delete by sync", e)
		}
	}

	out := p.ok("trash", "restore", "/src")
	if !strings.Contains(out, "restored /src: 9 entries") {
		t.Errorf("restore said %q", out)
	}
	if got := p.serverTree("/src"); !maps.Equal(got, before) {
		t.Errorf("server tree after the restore differs:\nwant %v\ngot  %v", before, got)
	}
	if got := p.trashList("/src"); len(got) != 0 {
		t.Errorf("the restored entries are still in the trash: %+v", got)
	}
	p.ok("push")
	if got := mountSubtree(t, p.mount, "src"); !maps.Equal(got, before) {
		t.Errorf("container tree after the push differs:\nwant %v\ngot  %v", before, got)
	}
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify after the restore: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}

	// A restore over a live file that differs is refused (EEXIST) unless
	// --force, which keeps the live version in the trash.
	p.sh(`echo v2 > src/main.go`)
	p.ok("exec", "--", "sh", "-c", "echo v3 > src/main.go")
	r := p.cli("", "trash", "restore", "/src/main.go")
	if r.code != 1 || !strings.Contains(r.stderr, "EEXIST") {
		t.Fatalf("restore over a live file: exit %d, stderr %q; want 1 and EEXIST", r.code, r.stderr)
	}
	p.ok("trash", "restore", "--force", "/src/main.go")
	if got := p.ok("read", "/src/main.go"); got != "v2\n" {
		t.Errorf("forced restore: /src/main.go = %q, want the newest trashed version v2", got)
	}
	if es := p.trashList("/src/main.go"); len(es) == 0 || es[0].By != "restore" {
		t.Errorf("the replaced live version is not in the trash first: %+v", es)
	}
}

type statusJSON struct {
	Pending *struct {
		State   string `json:"state"`
		Error   string `json:"error"`
		Deletes int    `json:"deletes"`
	} `json:"pending"`
	Trash struct {
		Entries int64 `json:"entries"`
	} `json:"trash"`
}

func (p *pair) status() statusJSON {
	p.t.Helper()
	var st statusJSON
	if err := json.Unmarshal([]byte(p.ok("status", "--json")), &st); err != nil {
		p.t.Fatal(err)
	}
	return st
}

// A command that deletes most of the workspace (the defaults: more than
// half, at least 1,000 paths) leaves its pull paused before any deletion:
// the server keeps every file, status says why, pushes and execs are held
// back (nothing of the container is overwritten), and a pull with
// --allow-mass-delete applies it, the deleted files in the trash.
func TestMassDeletePausesUntilConfirmed(t *testing.T) {
	p := newPair(t, pairOpts{})
	const n = 1200
	p.sh(genScript(n) + ` && mkdir keep && echo k > keep/a`)
	if got := p.serverFiles(); got != n {
		t.Fatalf("server has %d files under /gen, want %d", got, n)
	}

	r := p.cli("", "exec", "--", "sh", "-c", "rm -rf gen && echo new > fresh")
	if r.code != 0 || !strings.Contains(r.stderr, "allow-mass-delete") {
		t.Fatalf("exec of the mass delete: exit %d, stderr %q; want 0 and a warning naming --allow-mass-delete", r.code, r.stderr)
	}
	if got := p.serverFiles(); got != n {
		t.Fatalf("server has %d files under /gen after the paused pull, want all %d: a deletion was applied", got, n)
	}
	st := p.status()
	// The count stops once it is past the bound (1,000 and half of the
	// workspace's 1,203 paths), at the batch of 256 that crossed it.
	if st.Pending == nil || st.Pending.State != "paused" || st.Pending.Deletes < 1000 {
		t.Fatalf("status pending = %+v, want paused with at least 1000 deletes", st.Pending)
	}
	if out := p.ok("status"); !strings.Contains(out, "PAUSED") {
		t.Errorf("status does not say the pull is paused:\n%s", out)
	}

	// Held back: a plain pull pauses again, an exec's push is refused, and
	// the container's tree stays as the command left it.
	if r := p.cli("", "pull"); r.code != 1 || !strings.Contains(r.stderr, "EMASS_DELETE") {
		t.Errorf("pull without confirmation: exit %d, stderr %q; want 1 and EMASS_DELETE", r.code, r.stderr)
	}
	if r := p.cli("", "exec", "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "EPENDING") {
		t.Errorf("exec while paused: exit %d, stderr %q; want 1 and EPENDING", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(p.mount, "gen")); !os.IsNotExist(err) {
		t.Errorf("the container's gen/ came back while the pull was paused: %v", err)
	}
	if got := p.serverFiles(); got != n {
		t.Fatalf("server has %d files under /gen, want %d", got, n)
	}

	out := p.ok("pull", "--allow-mass-delete")
	if !strings.HasPrefix(out, "pulled ") {
		t.Errorf("confirmed pull said %q", out)
	}
	if got := p.serverFiles(); got != -1 {
		t.Errorf("server still has /gen (%d files) after the confirmed pull", got)
	}
	if got := p.ok("read", "/fresh"); got != "new\n" {
		t.Errorf("/fresh = %q after the confirmed pull", got)
	}
	if got := p.ok("read", "/keep/a"); got != "k\n" {
		t.Errorf("/keep/a = %q", got)
	}
	st = p.status()
	if st.Pending != nil {
		t.Errorf("pending after the confirmed pull: %+v", st.Pending)
	}
	if st.Trash.Entries < n+1 {
		t.Errorf("the trash holds %d entries, want the %d files and gen/", st.Trash.Entries, n)
	}
	p.ok("exec", "--", "true")
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify after the confirmed pull: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}

	// Nothing lost: the whole tree comes back from the trash.
	start := time.Now()
	p.ok("trash", "restore", "/gen")
	p.ok("push")
	if got := p.serverFiles(); got != n {
		t.Errorf("restored %d files, want %d", got, n)
	}
	if got, err := os.ReadFile(filepath.Join(p.mount, "gen", "7")); err != nil || string(got) != "file 7\n" {
		t.Errorf("container gen/7 after restore and push = %q, %v", got, err)
	}
	t.Logf("restore and push of %d files: %v", n, time.Since(start))
}
