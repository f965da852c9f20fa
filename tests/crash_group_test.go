package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/internal/fusetest"
)

// TestCrashDuringGroupCommit SIGKILLs computerd at a group commit of local
// mutations (vfs/group.go), before or after SQLite's commit, or as the
// write-behind runs a queued mutation (vfs/behind.go), while one
// process creates, writes and closes files through the mount and fsyncs
// every 25th. The durability contract (docs/ARCHITECTURE.md "Durability")
// says what may survive: the store after the crash is the state after some
// prefix of the mutations the mount answered (groups commit in order, each
// whole or not at all), and that prefix covers every fsync that returned.
// So the files are f0..fM for some M at or past the last fsynced one, each
// with its full content, except that fM may be empty (its create committed,
// its content's commit not).
func TestCrashDuringGroupCommit(t *testing.T) {
	fusetest.RequireFUSE(t)
	for _, sc := range []struct {
		point string
		hit   int
	}{
		{"vfs.group.commit", 3},
		{"vfs.group.commit", 40},
		{"vfs.group.committed", 7},
		{"vfs.group.committed", 55},
		// While mutations answered from memory wait in the queue of the
		// write-behind (vfs/behind.go): the same prefix must survive.
		{"vfs.behind.run", 9},
		{"vfs.behind.run", 400},
		// Halfway through writing the rows of queued creates (node rows
		// written, names not: vfs/pending.go).
		{"vfs.pending.flush", 2},
		{"vfs.pending.flush", 30},
	} {
		t.Run(fmt.Sprintf("%s:%d", sc.point, sc.hit), func(t *testing.T) {
			dir := t.TempDir()
			mnt, state, token := filepath.Join(dir, "mnt"), filepath.Join(dir, "state.db"), filepath.Join(dir, "token")
			if err := os.WriteFile(token, []byte("crash-group-token\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
			addr := freePort(t)
			args := []string{bin.computerd, "--listen", addr, "--mount", mnt, "--state", state, "--token-file", token}
			victim := start(t, "computerd", args, crashpoint.Env+"="+sc.point+":"+strconv.Itoa(sc.hit))
			waitHealthy(t, "http://"+addr, victim)

			content := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("file %d\n", i)), 1+i%50) }
			lastSynced := -1
			written := 0
			for i := 0; ; i++ {
				err := writeFile(filepath.Join(mnt, fmt.Sprint("f", i)), content(i), i%25 == 24)
				if err != nil {
					t.Logf("write %d: %v", i, err)
					break
				}
				written = i + 1
				if i%25 == 24 {
					lastSynced = i
				}
				if i > 200000 {
					t.Fatalf("computerd never reached %s:%d", sc.point, sc.hit)
				}
			}
			select {
			case <-victim.done:
			case <-time.After(time.Minute):
				t.Fatal("computerd still running after the mount failed")
			}
			if want := "crashpoint: " + sc.point + " hit"; !strings.Contains(victim.output(), want) {
				t.Fatalf("computerd died (%v) but not at %q:\n%s", victim.err, want, victim.output())
			}
			syscall.Unmount(mnt, syscall.MNT_DETACH)

			cd := start(t, "computerd", args)
			waitHealthy(t, "http://"+addr, cd)
			ents, err := os.ReadDir(mnt)
			if err != nil {
				t.Fatal(err)
			}
			present := map[int]bool{}
			for _, e := range ents {
				i, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "f"))
				if err != nil || !strings.HasPrefix(e.Name(), "f") {
					t.Errorf("unexpected name %q", e.Name())
					continue
				}
				present[i] = true
			}
			m := len(present) - 1
			for i := 0; i <= m; i++ {
				if !present[i] {
					t.Fatalf("f%d missing but %d files survived: not a prefix of the mutations", i, len(present))
				}
				got, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint("f", i)))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, content(i)) && !(i == m && len(got) == 0) {
					t.Errorf("f%d: %d bytes, want %d (or empty as the last one)", i, len(got), len(content(i)))
				}
			}
			if m < lastSynced {
				t.Errorf("files up to f%d survived, but f%d was fsynced", m, lastSynced)
			}
			if m >= written+1 {
				t.Errorf("f%d survived, but only %d writes were attempted", m, written+1)
			}
			t.Logf("%d files written (last fsynced f%d); f0..f%d survived", written, lastSynced, m)
		})
	}
}

// writeFile creates name with data, fsyncing it when sync is set, and
// reports the first error of create, write, fsync or close.
func writeFile(name string, data []byte, sync bool) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
