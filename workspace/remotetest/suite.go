// Package remotetest is the contract of workspace.Remote as a test suite
// that every implementation runs (restic's backend/test, litestream's
// RunWithReplicaClient): the real remote over the sync wire to a computerd
// (package remote) and the fake of package workspacetest. Two
// implementations that pass it cannot drift apart on what the workspace
// relies on.
//
// # What the suite asserts
//
// A push carries the server's changes to the container; a pull brings the
// container's back and leaves out the paths of the ignore list it is given
// (nil: the default, node_modules; empty: nothing); entries applied from
// one side are not sent back to it; repeating a push or a pull moves
// nothing; a pull within a budget stops after a batch with More set and
// the next one goes on where it stopped, losing and repeating nothing; the
// progress a push or pull reports grows batch by batch and its last totals
// add up to the report; a closed remote reports errors; two runtimes of
// one server store are separate peers, each with its own watermarks; Exec
// returns the command's output and exit code; StartExec answers with an
// id while the command runs on, ListExecs shows it (running, then exited
// with its code and output bytes), AttachExec replays its output from any
// offset it still holds (none from ExecFromEnd) and returns its exit,
// refuses an offset past the end (vfs.ErrInvalid), KillExec ends it by
// signal, an unknown id is vfs.ErrNotExist and one of another container
// runtime ErrExecLost; Verify tells a converged pair from a drifted one
// (skipped when the remote answers workspace.ErrNotSupported); Status
// reports both stores' positions.
//
// It is a test helper: only tests import it.
package remotetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
	"github.com/wsync/wsync/workspace"
)

// Harness is one Remote joined to the two stores it syncs.
type Harness struct {
	// Remote syncs Server with Container. It was built for a workspace
	// with the default ignore list. If it is an io.Closer, the suite's
	// closed-remote case closes it.
	Remote workspace.Remote
	// Server is the store the Remote pushes from and pulls into.
	Server *vfs.Store
	// Container is the store of the container side: the suite writes the
	// container's changes into it and reads what a push brought.
	Container *vfs.Store
	// Attach builds a second Remote on Server, for the runtime rt with a
	// container store of its own (which it returns), as a workspace does
	// for an attached runtime. Its cleanup t owns.
	Attach func(t *testing.T, rt workspace.Runtime) (workspace.Remote, *vfs.Store)
}

// Suite runs the contract, each case on a harness of its own from
// newHarness (whose cleanup t owns).
func Suite(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"PushCarriesServerChanges", testPush},
		{"PullBringsContainerChanges", testPull},
		{"PullHonoursIgnore", testPullIgnore},
		{"NoBounce", testNoBounce},
		{"Idempotent", testIdempotent},
		{"BudgetedPullResumes", testBudgetedPull},
		{"ProgressAddsUpToTheReport", testProgress},
		{"ClosedRemoteReportsErrors", testClosed},
		{"Exec", testExec},
		{"DetachedExecOutlivesItsCall", testDetached},
		{"AttachReplaysFromAnOffset", testAttachOffset},
		{"KillAndWait", testKillExec},
		{"UnknownAndLostExecIDs", testExecIDs},
		{"Verify", testVerify},
		{"Status", testStatus},
		{"RuntimesAreSeparatePeers", testRuntimes},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newHarness(t)) })
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// write makes file in s with data, parents first.
func write(t *testing.T, s *vfs.Store, file, data string) {
	t.Helper()
	if dir := path.Dir(file); dir != "." {
		if err := s.MkdirPath(context.Background(), dir, 0o755, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.WriteFile(context.Background(), file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, s *vfs.Store, path string) {
	t.Helper()
	if err := s.RemovePath(context.Background(), path, true); err != nil {
		t.Fatal(err)
	}
}

// has checks that side holds path with want.
func has(t *testing.T, side string, s *vfs.Store, path, want string) {
	t.Helper()
	got, err := s.ReadFile(context.Background(), path)
	if err != nil {
		t.Errorf("%s %s: %v, want %q", side, path, err, want)
		return
	}
	if string(got) != want {
		t.Errorf("%s %s = %q, want %q", side, path, got, want)
	}
}

// lacks checks that side does not hold path.
func lacks(t *testing.T, side string, s *vfs.Store, path string) {
	t.Helper()
	if _, err := s.ReadFile(context.Background(), path); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("%s %s: %v, want ErrNotExist", side, path, err)
	}
}

func push(t *testing.T, h Harness) workspace.SyncReport {
	t.Helper()
	rep, err := h.Remote.Push(ctxOf(t), workspace.SyncOptions{})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return rep
}

func pull(t *testing.T, h Harness, ignore []string) workspace.SyncReport {
	t.Helper()
	rep, err := h.Remote.Pull(ctxOf(t), workspace.SyncOptions{Ignore: ignore})
	if err != nil {
		t.Fatalf("pull %q: %v", ignore, err)
	}
	return rep
}

// quiet checks that a sync moved nothing and left the receiver as it was.
func quiet(t *testing.T, what string, rep workspace.SyncReport, receiver *vfs.Store, revBefore int64) {
	t.Helper()
	if rep.Entries != 0 || rep.Skipped != 0 || rep.Objects != 0 {
		t.Errorf("%s sent entries=%d skipped=%d objects=%d, want nothing", what, rep.Entries, rep.Skipped, rep.Objects)
	}
	if got := receiver.CurrentRev(); got != revBefore {
		t.Errorf("%s moved the receiver from rev %d to %d", what, revBefore, got)
	}
}

func testPush(t *testing.T, h Harness) {
	write(t, h.Server, "src/main.go", "package main\n")
	write(t, h.Server, "README", "hello")
	if err := h.Server.SymlinkPath(context.Background(), "README", "link"); err != nil {
		t.Fatal(err)
	}
	rep := push(t, h)
	if rep.Entries < 4 {
		t.Errorf("push applied %d entries, want at least 4 (src, main.go, README, link)", rep.Entries)
	}
	if rep.RuntimeID == "" {
		t.Error("push report names no runtime")
	}
	has(t, "container", h.Container, "src/main.go", "package main\n")
	if got, err := h.Container.ReadLinkPath(context.Background(), "link"); err != nil || got != "README" {
		t.Errorf("container link -> %q, %v; want README", got, err)
	}

	write(t, h.Server, "README", "bye")
	remove(t, h.Server, "src")
	push(t, h)
	has(t, "container", h.Container, "README", "bye")
	lacks(t, "container", h.Container, "src/main.go")
	lacks(t, "container", h.Container, "src")
}

func testPull(t *testing.T, h Harness) {
	write(t, h.Container, "out/build.log", "ok\n")
	rep := pull(t, h, nil)
	if rep.Entries < 2 {
		t.Errorf("pull applied %d entries, want at least 2 (out, build.log)", rep.Entries)
	}
	has(t, "server", h.Server, "out/build.log", "ok\n")

	remove(t, h.Container, "out/build.log")
	pull(t, h, nil)
	lacks(t, "server", h.Server, "out/build.log")
}

// Each pull leaves out what its own ignore list names, whatever the list
// the remote was built with.
func testPullIgnore(t *testing.T, h Harness) {
	write(t, h.Container, "node_modules/a/index.js", "a")
	write(t, h.Container, "keep1", "1")
	pull(t, h, nil)
	has(t, "server", h.Server, "keep1", "1")
	lacks(t, "server", h.Server, "node_modules/a/index.js")

	write(t, h.Container, "build/b.o", "b")
	write(t, h.Container, "node_modules/c/index.js", "c")
	write(t, h.Container, "keep2", "2")
	pull(t, h, []string{"build"})
	has(t, "server", h.Server, "keep2", "2")
	has(t, "server", h.Server, "node_modules/c/index.js", "c")
	lacks(t, "server", h.Server, "build/b.o")

	write(t, h.Container, "node_modules/d/index.js", "d")
	write(t, h.Container, "build/e.o", "e")
	pull(t, h, []string{})
	has(t, "server", h.Server, "node_modules/d/index.js", "d")
	has(t, "server", h.Server, "build/e.o", "e")
}

func testNoBounce(t *testing.T, h Harness) {
	write(t, h.Container, "from/container", "c")
	pull(t, h, nil)
	rev := h.Container.CurrentRev()
	quiet(t, "push after a pull", push(t, h), h.Container, rev)

	write(t, h.Server, "from/server", "s")
	push(t, h)
	rev = h.Server.CurrentRev()
	quiet(t, "pull after a push", pull(t, h, nil), h.Server, rev)
}

func testIdempotent(t *testing.T, h Harness) {
	write(t, h.Server, "a", "1")
	write(t, h.Container, "b", "2")
	push(t, h)
	rev := h.Container.CurrentRev()
	quiet(t, "second push", push(t, h), h.Container, rev)
	pull(t, h, nil)
	rev = h.Server.CurrentRev()
	quiet(t, "second pull", pull(t, h, nil), h.Server, rev)
	has(t, "server", h.Server, "a", "1")
	has(t, "server", h.Server, "b", "2")
	has(t, "container", h.Container, "a", "1")
	has(t, "container", h.Container, "b", "2")
}

func testClosed(t *testing.T, h Harness) {
	c, ok := h.Remote.(io.Closer)
	if !ok {
		t.Skip("the remote holds nothing to close")
	}
	push(t, h)
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	write(t, h.Server, "after-close", "x")
	write(t, h.Container, "after-close-c", "y")
	if _, err := h.Remote.Push(ctxOf(t), workspace.SyncOptions{}); err == nil {
		t.Error("push on a closed remote: no error")
	}
	if _, err := h.Remote.Pull(ctxOf(t), workspace.SyncOptions{}); err == nil {
		t.Error("pull on a closed remote: no error")
	}
	lacks(t, "container", h.Container, "after-close")
	lacks(t, "server", h.Server, "after-close-c")
	// Status answers from what it knows rather than fail.
	st, err := h.Remote.Status(ctxOf(t))
	if err != nil || st.Connected {
		t.Errorf("status of a closed remote: %+v, %v; want disconnected, no error", st, err)
	}
}

func testExec(t *testing.T, h Harness) {
	var stdout bytes.Buffer
	res, err := h.Remote.Exec(ctxOf(t), workspace.ExecSpec{Shell: "echo hi ; exit 3"}, func(ev workspace.ExecEvent) {
		if ev.Stream == workspace.Stdout {
			stdout.Write(ev.Data)
		}
	})
	if errors.Is(err, workspace.ErrNotSupported) {
		t.Skip("the remote runs no commands")
	}
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.ExitCode != 3 || res.ExecID == "" {
		t.Errorf("exec result %+v, want exit code 3 and an exec id", res)
	}
	if got := stdout.String(); got != "hi\n" {
		t.Errorf("stdout %q, want %q", got, "hi\n")
	}
}

func testVerify(t *testing.T, h Harness) {
	write(t, h.Server, "src/a", "a")
	push(t, h)
	rep, err := h.Remote.Verify(ctxOf(t))
	if errors.Is(err, workspace.ErrNotSupported) {
		t.Skip("the remote does not verify")
	}
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !rep.Converged {
		t.Errorf("verify after a push: %+v, want converged", rep)
	}
	write(t, h.Container, "node_modules/x", "ignored on both sides")
	if rep, err = h.Remote.Verify(ctxOf(t)); err != nil || !rep.Converged {
		t.Errorf("verify with only an ignored path apart: %+v, %v; want converged", rep, err)
	}
	write(t, h.Container, "src/drift", "d")
	rep, err = h.Remote.Verify(ctxOf(t))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Converged || !slices.Contains(rep.Differences, "/src/drift") {
		t.Errorf("verify with a container-only file: %+v, want /src/drift among the differences", rep)
	}
}

func testStatus(t *testing.T, h Harness) {
	write(t, h.Server, "s", "s")
	write(t, h.Container, "c", "c")
	pull(t, h, nil)
	push(t, h)
	st, err := h.Remote.Status(ctxOf(t))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if !st.Connected || st.RuntimeID == "" {
		t.Errorf("status %+v: want connected with a runtime id", st)
	}
	if st.Server.StoreID != h.Server.ID() || st.Container.StoreID != h.Container.ID() {
		t.Errorf("status store ids %q %q, want %q %q", st.Server.StoreID, st.Container.StoreID, h.Server.ID(), h.Container.ID())
	}
	if st.Server.CurrentRev != h.Server.CurrentRev() || st.Container.CurrentRev != h.Container.CurrentRev() {
		t.Errorf("status revs %d %d, want %d %d", st.Server.CurrentRev, st.Container.CurrentRev, h.Server.CurrentRev(), h.Container.CurrentRev())
	}
	if !st.Server.Push.Watermark().Covers(watermark.At(h.Server.CurrentRev())) {
		t.Errorf("status push cursor %+v short of the server's rev %d after a push", st.Server.Push, h.Server.CurrentRev())
	}
	if !st.Server.Fetch.Watermark().Covers(watermark.At(h.Container.CurrentRev())) {
		t.Errorf("status fetch cursor %+v short of the container's rev %d after a pull and a push", st.Server.Fetch, h.Container.CurrentRev())
	}
}

// testRuntimes: a second runtime is a peer of its own. A push to one does
// not advance the other's watermarks, so each container gets every change
// once, and what one container wrote reaches the other through the server.
func testRuntimes(t *testing.T, h Harness) {
	ctx := ctxOf(t)
	rt := workspace.Runtime{Name: "b"}
	other, container := h.Attach(t, rt)
	write(t, h.Server, "shared/s", "server")
	push(t, h)
	if _, err := other.Push(ctx, workspace.SyncOptions{}); err != nil {
		t.Fatalf("push to b: %v", err)
	}
	has(t, "container", h.Container, "shared/s", "server")
	has(t, "b", container, "shared/s", "server")
	write(t, container, "from-b", "b")
	if _, err := other.Pull(ctx, workspace.SyncOptions{}); err != nil {
		t.Fatalf("pull from b: %v", err)
	}
	push(t, h)
	has(t, "container", h.Container, "from-b", "b")
	rep, err := other.Push(ctx, workspace.SyncOptions{})
	if err != nil {
		t.Fatalf("push to b again: %v", err)
	}
	if rep.Entries != 0 {
		t.Errorf("b was sent back %d entries it wrote", rep.Entries)
	}
	for _, peer := range []string{workspace.DefaultPeer, rt.Peer()} {
		wm, err := h.Server.Watermarks(ctx, peer)
		if err != nil || wm.Push.Rev == 0 || wm.Push.Rev != h.Server.CurrentRev() {
			t.Errorf("server's watermarks for %s: %+v %v, want a push cursor at rev %d", peer, wm, err, h.Server.CurrentRev())
		}
	}
}

// testBudgetedPull: a pull of 521 entries (three batches) with a budget
// of one entry moves one batch a call, reports More until the last, and
// the calls together bring every file once.
func testBudgetedPull(t *testing.T, h Harness) {
	const n = 520
	for i := range n {
		write(t, h.Container, fmt.Sprintf("many/f%03d", i), fmt.Sprint(i))
	}
	var reps []workspace.SyncReport
	for {
		rep, err := h.Remote.Pull(ctxOf(t), workspace.SyncOptions{Budget: workspace.Budget{Entries: 1}})
		if err != nil {
			t.Fatalf("budgeted pull %d: %v", len(reps), err)
		}
		reps = append(reps, rep)
		if !rep.More {
			break
		}
		if rep.Batches != 1 {
			t.Errorf("budgeted pull %d moved %d batches, want 1", len(reps), rep.Batches)
		}
		if len(reps) > 10 {
			t.Fatalf("the budgeted pulls never end: %+v", reps)
		}
	}
	entries := 0
	for _, r := range reps {
		entries += r.Entries + r.Skipped
	}
	if len(reps) != 3 || entries != n+1 {
		t.Errorf("%d budgeted pulls moved %d entries, want 3 pulls moving %d", len(reps), entries, n+1)
	}
	for i := range n {
		has(t, "server", h.Server, fmt.Sprintf("many/f%03d", i), fmt.Sprint(i))
	}
	rev := h.Server.CurrentRev()
	quiet(t, "pull after the budgeted ones", pull(t, h, nil), h.Server, rev)
}

// testProgress: a push (with the snapshot of a remote that bootstraps an
// empty container) and a pull tell their observer after each batch; the
// totals grow within each op and the last ones add up to the report.
func testProgress(t *testing.T, h Harness) {
	for i := range 300 {
		write(t, h.Server, fmt.Sprintf("out/f%03d", i), fmt.Sprintf("server file %d", i))
	}
	var seen []workspace.Progress
	observe := func(p workspace.Progress) { seen = append(seen, p) }
	rep, err := h.Remote.Push(ctxOf(t), workspace.SyncOptions{Progress: observe})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	addsUp(t, "push", seen, rep, "bootstrap", "push")

	for i := range 300 {
		write(t, h.Container, fmt.Sprintf("in/f%03d", i), fmt.Sprintf("container file %d", i))
	}
	seen = nil
	if rep, err = h.Remote.Pull(ctxOf(t), workspace.SyncOptions{Progress: observe}); err != nil {
		t.Fatalf("pull: %v", err)
	}
	addsUp(t, "pull", seen, rep, "pull")
	has(t, "server", h.Server, "in/f299", "container file 299")
}

// addsUp checks what a sync call's observer saw: runs of the ops allowed,
// in that order, each growing batch by batch, whose last totals add up to
// the call's report (Entries counts entries moved: applied, skipped or
// deferred).
func addsUp(t *testing.T, what string, seen []workspace.Progress, rep workspace.SyncReport, ops ...string) {
	t.Helper()
	if len(seen) == 0 {
		t.Fatalf("%s: no progress for %+v", what, rep)
	}
	var sum workspace.Progress
	for i, p := range seen {
		next := i+1 == len(seen) || seen[i+1].Op != p.Op
		if i > 0 && seen[i-1].Op == p.Op {
			q := seen[i-1]
			if p.Entries < q.Entries || p.Objects < q.Objects || p.Bytes < q.Bytes || p.Batches != q.Batches+1 {
				t.Errorf("%s: progress went from %+v to %+v", what, q, p)
			}
		} else {
			k := slices.Index(ops, p.Op)
			if k < 0 {
				t.Fatalf("%s: progress of op %q (allowed: %q)", what, p.Op, ops)
			}
			ops = ops[k+1:] // each op once, in order
		}
		if next {
			sum.Entries += p.Entries
			sum.Objects += p.Objects
			sum.Bytes += p.Bytes
			sum.Batches += p.Batches
		}
	}
	if sum.Entries != rep.Entries+rep.Skipped+rep.Deferred || sum.Objects != rep.Objects || sum.Bytes != rep.Bytes || sum.Batches != rep.Batches {
		t.Errorf("%s: progress adds up to %+v, the report says %+v", what, sum, rep)
	}
}

// collected is the output AttachExec passed, with its offsets checked to
// follow on from from.
type collected struct {
	t    *testing.T
	next int64
	buf  bytes.Buffer
}

func (c *collected) out(ev workspace.ExecEvent) {
	if ev.Offset != c.next {
		c.t.Errorf("output at offset %d, want %d", ev.Offset, c.next)
	}
	c.next = ev.Offset + int64(len(ev.Data))
	c.buf.Write(ev.Data)
}

// findExec is id's entry in the remote's list.
func findExec(t *testing.T, h Harness, id string) (workspace.ExecInfo, bool) {
	t.Helper()
	rt, list, err := h.Remote.ListExecs(ctxOf(t))
	if err != nil {
		t.Fatalf("list execs: %v", err)
	}
	if rt == "" || workspace.ExecRuntimeID(id) != rt {
		t.Errorf("list names runtime %q, the exec id %q", rt, id)
	}
	for _, e := range list {
		if e.ExecID == id {
			return e, true
		}
	}
	return workspace.ExecInfo{}, false
}

// testDetached: a started command runs on after StartExec answered and
// after the context it was started with ended; it is listed as running,
// then as exited with its code and output.
func testDetached(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(ctxOf(t))
	id, err := h.Remote.StartExec(ctx, workspace.ExecSpec{Shell: "echo started ; sleep 0.5 ; echo done ; exit 7"})
	cancel()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := workspace.ValidateExecID(id); err != nil {
		t.Fatalf("start answered id %q: %v", id, err)
	}
	if e, ok := findExec(t, h, id); !ok || e.State != workspace.ExecStateRunning || e.Result != nil || e.Started.IsZero() || e.Shell == "" {
		t.Errorf("listed right after the start: %+v, %v; want running, with its start and command line", e, ok)
	}
	c := &collected{t: t}
	res, err := h.Remote.AttachExec(ctxOf(t), id, 0, c.out)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if res.ExitCode != 7 || res.ExecID != id || res.OutputBytes != int64(c.buf.Len()) {
		t.Errorf("attach result %+v, want exit 7, the id, output bytes %d", res, c.buf.Len())
	}
	if got := c.buf.String(); got != "started\ndone\n" {
		t.Errorf("output %q, want started and done", got)
	}
	e, ok := findExec(t, h, id)
	if !ok || e.State != workspace.ExecStateExited || e.Result == nil || e.Result.ExitCode != 7 || e.OutputBytes != 13 || e.LogStart != 0 || e.Ended.IsZero() {
		t.Errorf("listed after the end: %+v (result %+v), %v; want exited 7 with 13 bytes of output", e, e.Result, ok)
	}
}

// testAttachOffset: attaching at an offset replays the rest of the log;
// from the end, nothing but the exit; past the end is an invalid offset.
func testAttachOffset(t *testing.T, h Harness) {
	id, err := h.Remote.StartExec(ctxOf(t), workspace.ExecSpec{Shell: "echo hello ; echo world"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := h.Remote.AttachExec(ctxOf(t), id, 0, func(workspace.ExecEvent) {}); err != nil {
		t.Fatalf("attach: %v", err)
	}
	c := &collected{t: t, next: 6}
	if _, err := h.Remote.AttachExec(ctxOf(t), id, 6, c.out); err != nil || c.buf.String() != "world\n" {
		t.Errorf("replay from 6: %q, %v; want \"world\\n\"", c.buf.String(), err)
	}
	res, err := h.Remote.AttachExec(ctxOf(t), id, workspace.ExecFromEnd, func(ev workspace.ExecEvent) {
		t.Errorf("output %q from the end of a finished exec", ev.Data)
	})
	if err != nil || res.ExitCode != 0 || res.OutputBytes != 12 {
		t.Errorf("attach from the end: %+v, %v; want the exit at offset 12", res, err)
	}
	if _, err := h.Remote.AttachExec(ctxOf(t), id, 1<<40, func(workspace.ExecEvent) {}); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("attach past the end: %v, want vfs.ErrInvalid", err)
	}
}

// testKillExec: a kill ends a running command by the signal, which its
// exit tells; killing it again once it ended is no error.
func testKillExec(t *testing.T, h Harness) {
	id, err := h.Remote.StartExec(ctxOf(t), workspace.ExecSpec{Shell: "echo up ; sleep 60"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	up := make(chan struct{})
	var once bool
	done := make(chan workspace.ExecResult, 1)
	go func() {
		res, err := h.Remote.AttachExec(ctxOf(t), id, 0, func(workspace.ExecEvent) {
			if !once {
				once = true
				close(up)
			}
		})
		if err != nil {
			t.Errorf("attach: %v", err)
		}
		done <- res
	}()
	select {
	case <-up:
	case <-ctxOf(t).Done():
		t.Fatal("no output from the command")
	}
	if err := h.Remote.KillExec(ctxOf(t), id, syscall.SIGTERM); err != nil {
		t.Fatalf("kill: %v", err)
	}
	res := <-done
	if res.Signal != int(syscall.SIGTERM) || res.ExitCode != 128+int(syscall.SIGTERM) || !res.Killed {
		t.Errorf("killed exec ended %+v, want SIGTERM (143), killed", res)
	}
	if err := h.Remote.KillExec(ctxOf(t), id, syscall.SIGKILL); err != nil {
		t.Errorf("kill of an exec that ended: %v", err)
	}
	if e, _ := findExec(t, h, id); e.State != workspace.ExecStateKilled {
		t.Errorf("listed as %q, want killed", e.State)
	}
}

// testExecIDs: an id the runner never issued is vfs.ErrNotExist; one of
// another container runtime (computerd restarted) is ErrExecLost.
func testExecIDs(t *testing.T, h Harness) {
	id, err := h.Remote.StartExec(ctxOf(t), workspace.ExecSpec{Shell: "exit 0"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	rt := workspace.ExecRuntimeID(id)
	discard := func(workspace.ExecEvent) {}
	if _, err := h.Remote.AttachExec(ctxOf(t), rt+":999999", 0, discard); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("attach to an id never issued: %v, want vfs.ErrNotExist", err)
	}
	other := "00000000-0000-0000-0000-000000000000:1"
	if _, err := h.Remote.AttachExec(ctxOf(t), other, 0, discard); !errors.Is(err, workspace.ErrExecLost) {
		t.Errorf("attach to an id of another runtime: %v, want ErrExecLost", err)
	}
	if err := h.Remote.KillExec(ctxOf(t), other, syscall.SIGTERM); !errors.Is(err, workspace.ErrExecLost) {
		t.Errorf("kill of an id of another runtime: %v, want ErrExecLost", err)
	}
}
