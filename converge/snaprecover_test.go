package converge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

var errInjected = errors.New("injected install failure")

// failInstallAfter makes the install fail with err once n batches have
// committed (n < 0: never), until the test ends. errKilled stands for the
// process dying there.
func failInstallAfter(t *testing.T, n int, err error) {
	t.Helper()
	batches := 0
	installBatchHook = func() error {
		if batches++; n >= 0 && batches > n {
			return err
		}
		return nil
	}
	t.Cleanup(func() { installBatchHook = nil })
}

// injected reports whether err is the injected failure, as it crosses
// the wire (a peer's error arrives as its text).
func injected(err error) bool {
	return err != nil && (strings.Contains(err.Error(), errInjected.Error()) || strings.Contains(err.Error(), errKilled.Error()))
}

func stagingSize(t *testing.T, p string) int64 {
	t.Helper()
	var n int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(p + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func assertNoStaging(t *testing.T, p string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(p + suffix); err == nil {
			t.Errorf("%s%s still on disk (%d bytes)", p, suffix, fi.Size())
		}
	}
}

// An install cut short between batches (the process dies there in the
// crash matrix) leaves a store that is no longer empty, so no bootstrap
// ever reaches it again: the next Register finishes the install from the
// staging and removes it.
func TestCutShortInstallFinishesAtRegister(t *testing.T) {
	ctx := context.Background()
	server, cont, r := snapRig(t, genEntries(3_000))
	failInstallAfter(t, 3, errKilled)
	_, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName})
	if !injected(err) {
		t.Fatalf("bootstrap with the install cut short: err = %v", err)
	}
	if empty, err := cont.Empty(ctx); err != nil || empty {
		t.Fatalf("after 3 install batches the store is empty (%v, %v)", empty, err)
	}
	p := StagingPath(cont)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("staging after the cut-short install: %v", err)
	}
	installBatchHook = nil
	// computerd restarts.
	must(t, r.resp.Close())
	newRig(t, server, cont) // the restarted computerd registers: Register finishes the install
	assertNoStaging(t, p)
	assertSameRoot(t, server, cont, "roots after the install finished at register")
	ws, err := cont.Watermarks(ctx, server.ID())
	must(t, err)
	if want := watermark.At(server.CurrentRev()); ws.AppliedPush != want || ws.Fetch != want {
		t.Fatalf("container cursors after the finished install: %+v, want applied push and fetch at %v", ws, want)
	}
}

// A finish at Register that fails removes the staging (the push then
// re-baselines), and so does one that was already tried maxLocalResumes
// times (a process killed by every try must not loop on it).
func TestCutShortInstallThatCannotFinishIsRemoved(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, p string)
	}{
		{"install fails again", func(t *testing.T, p string) { failInstallAfter(t, 0, errInjected) }},
		{"tried too often", func(t *testing.T, p string) {
			db := rawDB(t, p)
			if _, err := db.Exec(`INSERT OR REPLACE INTO meta(key, value) VALUES('resumes', ?)`, maxLocalResumes); err != nil {
				t.Fatal(err)
			}
			db.Close()
			failInstallAfter(t, -1, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, cont, r := snapRig(t, genEntries(1_500))
			failInstallAfter(t, 2, errKilled)
			if _, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName}); !injected(err) {
				t.Fatalf("bootstrap with the install cut short: err = %v", err)
			}
			must(t, r.resp.Close())
			p := StagingPath(cont)
			tc.prepare(t, p)
			installed := 0
			hook := installBatchHook
			installBatchHook = func() error { installed++; return hook() }
			newRig(t, server, cont)
			assertNoStaging(t, p)
			if tc.name == "tried too often" && installed != 0 {
				t.Errorf("a staging tried %d times ran %d install batches at register", maxLocalResumes, installed)
			}
		})
	}
}

// A staging that was never verified, beside a store that is no longer
// empty (written while the snapshot was staging), can never install:
// Register removes it. Beside an empty store it stays for the resume.
func TestUnusableStagingRemovedAtRegister(t *testing.T) {
	server, cont, r := snapRig(t, genEntries(3_000))
	interruptBootstrap(t, server, r.session(t))
	p := StagingPath(cont)
	must(t, r.resp.Close())
	r = newRig(t, server, cont)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the staging beside an empty store is gone at register: %v", err)
	}
	must(t, r.resp.Close())
	applyAll(t, cont, genEntries(1))
	newRig(t, server, cont)
	assertNoStaging(t, p)
}

// A begin for another snapshot starts a new staging file: the file holds
// one snapshot at most, whatever was staged before.
func TestStagingHoldsOneSnapshot(t *testing.T) {
	ctx := context.Background()
	big := newStore(t, "big")
	applyAll(t, big, genEntries(20_000))
	small := newStore(t, "small")
	applyAll(t, small, genEntries(50))
	cont := newStore(t, "container")
	r := newRig(t, big, cont)
	_, err := Bootstrap(ctx, big, r.session(t), BootstrapOptions{Peer: peerName, noCommit: true})
	must(t, err)
	p := StagingPath(cont)
	before := stagingSize(t, p)
	r = newRig(t, small, cont)
	_, err = Bootstrap(ctx, small, r.session(t), BootstrapOptions{Peer: peerName, noCommit: true})
	must(t, err)
	after := stagingSize(t, p)
	t.Logf("staging: %d bytes for 20,000 records, then %d bytes for 50", before, after)
	if after > before/4 {
		t.Fatalf("staging of 50 records after one of 20,000: %d bytes (was %d)", after, before)
	}
}

// An install that fails in a live process (a full disk, a dropped session)
// after part of the tree went in leaves a store the sender will never
// bootstrap again: the staging is removed at once, and the next push
// re-baselines.
func TestFailedInstallRemovesUnusableStaging(t *testing.T) {
	ctx := context.Background()
	server, cont, r := snapRig(t, genEntries(1_500))
	failInstallAfter(t, 2, errInjected)
	if _, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName}); !injected(err) {
		t.Fatalf("bootstrap with a failing install: err = %v", err)
	}
	assertNoStaging(t, StagingPath(cont))
	installBatchHook = nil
	if _, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName}); !errors.Is(err, vfs.ErrNotEmpty) {
		t.Fatalf("bootstrap of the partly installed store: err = %v, want ErrNotEmpty", err)
	}
}

// A staging not yet verified, beside a store that fills while the process
// lives on (the bootstrap interrupted, then files written in the mount and
// pushed around it), is removed by the first Apply that is not the
// install's own: no begin will come for it again.
func TestUnusableStagingRemovedWhenAPushApplies(t *testing.T) {
	ctx := context.Background()
	server, cont, r := snapRig(t, genEntries(3_000))
	interruptBootstrap(t, server, r.session(t))
	p := StagingPath(cont)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("staging after an interrupted bootstrap: %v", err)
	}
	// What a push applies: upstream entries (here a directory).
	_, err := cont.Apply(ctx, []vfs.ChangeEntry{{Kind: vfs.EntryDir, Path: "pushed", Mode: 0o755, Rev: 1}}, vfs.ApplyOptions{Source: vfs.Upstream})
	must(t, err)
	testutil.WaitFor(t, "the staging removed after a push applied", 30*time.Second, func() bool {
		_, err := os.Stat(p)
		return errors.Is(err, os.ErrNotExist)
	})
	must(t, r.resp.Close())
	assertNoStaging(t, p)
}

// A staging not yet verified, met at start beside a store that cannot say
// whether it holds a tree (Empty fails; here the store is closed), is kept
// and the failure logged: removing it on a guess would cost a resumable
// bootstrap.
func TestRecoveryKeepsStagingWhenStoreCannotAnswer(t *testing.T) {
	server, cont, r := snapRig(t, genEntries(3_000))
	interruptBootstrap(t, server, r.session(t))
	p := StagingPath(cont)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no staging after the interrupted bootstrap: %v", err)
	}
	r.resp.Close()
	must(t, cont.Close())
	var logs strings.Builder
	resp := Register(syncwire.NewServer(cont, rpc.ServerOptions{}), cont, slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { resp.Close() })
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("staging removed although the store could not say it holds a tree: %v", err)
	}
	if !strings.Contains(logs.String(), "emptiness is unknown") {
		t.Errorf("the failure was not logged:\n%s", logs.String())
	}
}

// An install cut short (a full disk) once part of the tree is in removes
// the staging and releases its holds. When that release fails too (the
// disk still full), the holds are owed: the next Apply (the entry-wise
// push that follows) releases them, so no chunk stays referenced by a
// hold nothing will take over (before, they stayed until the next start).
func TestOwedHoldsGoWithTheNextApply(t *testing.T) {
	ctx := context.Background()
	server, hs := randomTree(t, 600)
	cont := openStore(t, filepath.Join(t.TempDir(), "container.db"))
	r := newRig(t, server, cont)
	failInstallAfter(t, 0, errInjected) // the first batch commits, then the install fails
	releases := 0
	releaseHoldsHook = func() error {
		if releases++; releases == 1 {
			return errInjected
		}
		return nil
	}
	t.Cleanup(func() { releaseHoldsHook = nil })
	_, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName})
	if !injected(err) {
		t.Fatalf("bootstrap with the install cut short: err = %v", err)
	}
	if empty, err := cont.Empty(ctx); err != nil || empty {
		t.Fatalf("after one install batch the store is empty (%v, %v)", empty, err)
	}
	assertNoStaging(t, StagingPath(cont))
	held, err := cont.HeldChunks(ctx, hs)
	must(t, err)
	owed := 0
	for _, h := range held {
		if h {
			owed++
		}
	}
	if releases != 1 || owed == 0 {
		t.Fatalf("after the failed release: %d releases tried, %d of %d chunks held; want 1 try and some held", releases, owed, len(hs))
	}
	// A push applies what the install left out; its Apply releases the
	// owed holds (in the background: closing the responder waits for it).
	_, err = cont.Apply(ctx, []vfs.ChangeEntry{{Kind: vfs.EntryDir, Path: "pushed", Mode: 0o755, Rev: 1}}, vfs.ApplyOptions{Source: vfs.Upstream})
	must(t, err)
	must(t, r.resp.Close())
	if releases != 2 {
		t.Errorf("%d releases tried after the next apply, want 2", releases)
	}
	assertHeld(t, cont, hs, false, fmt.Sprintf("the %d owed holds after the next apply", owed))
}
