package execrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

type rig struct {
	runner *execrun.Runner
	client *rpc.Client
	url    string
}

func newRig(t *testing.T, opts execrun.Options) *rig {
	t.Helper()
	return newRigWith(t, opts, Options{})
}

// newRigWith is newRig with the exec methods registered with o.
func newRigWith(t *testing.T, opts execrun.Options, o Options) *rig {
	t.Helper()
	ctx := context.Background()
	store, err := vfs.Open(ctx, filepath.Join(t.TempDir(), "c.db"), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	r, err := execrun.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	srv := syncwire.NewServer(store, rpc.ServerOptions{})
	Register(srv, r, o)
	hs := httptest.NewServer(srv)
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/sync"
	c := rpc.NewClient(rpc.ClientOptions{URL: url})
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		hs.Close()
	})
	return &rig{runner: r, client: c, url: url}
}

func (r *rig) session(t *testing.T) *rpc.Session {
	t.Helper()
	s, _, err := r.client.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type result struct {
	stdout, stderr string
	exit           *Exit
}

func drain(t *testing.T, st *Stream) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res result
	for {
		ev, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return res
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Exit != nil:
			res.exit = ev.Exit
		case ev.Stream == Stdout:
			res.stdout += string(ev.Data)
		case ev.Stream == Stderr:
			res.stderr += string(ev.Data)
		}
	}
}

func TestStartStreamsOutputAndExit(t *testing.T) {
	r := newRig(t, execrun.Options{})
	st, err := Start(context.Background(), r.session(t), Request{
		Shell: `echo out; echo err >&2; read x; echo "in=$x"; echo "v=$V"; exit 3`,
		Env:   []string{"V=42"}, Stdin: []byte("hello\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !strings.HasPrefix(st.ID, st.RuntimeID+":") {
		t.Errorf("id %q not fenced by runtime %q", st.ID, st.RuntimeID)
	}
	res := drain(t, st)
	if res.stdout != "out\nin=hello\nv=42\n" || res.stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
	}
	if res.exit == nil || res.exit.Code != 3 {
		t.Errorf("exit = %+v, want code 3", res.exit)
	}
}

func TestAttachReplaysAfterLostSession(t *testing.T) {
	r := newRig(t, execrun.Options{})
	st, err := Start(context.Background(), r.session(t), Request{Argv: []string{"sh", "-c", "printf abc; printf def"}})
	if err != nil {
		t.Fatal(err)
	}
	id := st.ID
	st.Close()
	if _, err := r.runner.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// A new stream from offset 2 replays the rest of the log, then the exit.
	st2, err := Attach(context.Background(), r.session(t), id, 2)
	if err != nil {
		t.Fatal(err)
	}
	res := drain(t, st2)
	if got := res.stdout + res.stderr; got != "cdef" || res.exit == nil || res.exit.Code != 0 {
		t.Errorf("replay from 2 = %q exit %+v", got, res.exit)
	}
}

func TestKillSignalsGroup(t *testing.T) {
	r := newRig(t, execrun.Options{})
	st, err := Start(context.Background(), r.session(t), Request{Shell: "echo ready; sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if ev, err := st.Next(ctx); err != nil || string(ev.Data) != "ready\n" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if err := Kill(ctx, r.session(t), st.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res := drain(t, st)
	if res.exit == nil || res.exit.Signal != syscall.SIGTERM || res.exit.Code != 128+15 {
		t.Errorf("exit = %+v, want SIGTERM", res.exit)
	}
}

func TestErrorsKeepTheirIdentityAcrossTheWire(t *testing.T) {
	r := newRig(t, execrun.Options{MaxRunning: 1})
	ctx := context.Background()
	st, err := Start(ctx, r.session(t), Request{Shell: "sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	defer Kill(ctx, r.session(t), st.ID, syscall.SIGKILL)
	if _, err := Start(ctx, r.session(t), Request{Argv: []string{"true"}}); !errors.Is(err, execrun.ErrBusy) {
		t.Errorf("second exec past the limit: %v, want EEXEC_BUSY", err)
	}
	if _, err := Attach(ctx, r.session(t), "other-runtime:1", 0); !errors.Is(err, execrun.ErrExecLost) {
		t.Errorf("attach to another runtime's id: %v, want EEXEC_LOST", err)
	}
	if _, err := Attach(ctx, r.session(t), r.runner.RuntimeID()+":999", 0); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("attach to an unknown id: %v, want ENOENT", err)
	}
	if _, err := Start(ctx, r.session(t), Request{Shell: "true", Cwd: "../.."}); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("cwd outside the root: %v, want EINVAL", err)
	}
}

// A command that cannot start is refused with the errno the kernel gave,
// as a code the caller knows (it went as EUNKNOWN, which the HTTP API
// answered 502, computerd's failure).
func TestACommandThatCannotStartKeepsItsErrno(t *testing.T) {
	r := newRig(t, execrun.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	script := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv []string
		want error
	}{
		{[]string{filepath.Join(dir, "missing")}, vfs.ErrNotExist},
		{[]string{"no-such-command-anywhere"}, vfs.ErrNotExist},
		{[]string{script}, vfs.ErrPerm},
		{[]string{dir}, vfs.ErrPerm},
		{[]string{garbage}, vfs.ErrInvalid},
	} {
		_, err := Start(ctx, r.session(t), Request{Argv: tc.argv})
		if !errors.Is(err, tc.want) {
			t.Errorf("start %v: %v, want %v", tc.argv, err, tc.want)
		}
	}
}

func TestLogTruncatedPastCap(t *testing.T) {
	r := newRig(t, execrun.Options{LogCap: 1 << 10})
	st, err := Start(context.Background(), r.session(t), Request{Shell: "head -c 100000 /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	id := st.ID
	st.Close()
	r.runner.Wait(context.Background(), id)
	if _, err := Attach(context.Background(), r.session(t), id, 0); !errors.Is(err, execrun.ErrLogTruncated) {
		t.Errorf("attach at 0 after 100 KB through a 1 KiB log: %v, want ELOG_TRUNCATED", err)
	}
}

// A live stream whose reader falls behind the bounded log skips what the
// log dropped and goes on to the exit: the offsets show the gap, the
// newest output and the exit arrive (the stream ended ELOG_TRUNCATED, with
// no exit, after 8-16 MiB of fast output).
func TestAStreamThatFallsBehindSkipsToTheExit(t *testing.T) {
	r := newRig(t, execrun.Options{LogCap: 1 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// More output than the session's flow-control window (4 MiB) holds
	// in flight, all of it written before the reader reads anything.
	const size = 32 << 20
	st, err := Start(ctx, r.session(t), Request{Shell: fmt.Sprintf("head -c %d /dev/zero; echo end", size)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := r.runner.Wait(ctx, st.ID); err != nil {
		t.Fatal(err)
	}
	var got, gaps int64
	next := int64(0)
	var tail []byte
	var exit *Exit
	for {
		ev, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if ev.Exit != nil {
			exit = ev.Exit
			continue
		}
		if ev.Offset > next {
			gaps++
		} else if ev.Offset < next {
			t.Fatalf("offset %d after the stream reached %d", ev.Offset, next)
		}
		got += int64(len(ev.Data))
		next = ev.Offset + int64(len(ev.Data))
		tail = append(tail, ev.Data...)
		if len(tail) > 64 {
			tail = tail[len(tail)-64:]
		}
	}
	if exit == nil || exit.Code != 0 {
		t.Fatalf("exit %+v, want code 0", exit)
	}
	if gaps == 0 || got >= size || next != size+4 || !strings.HasSuffix(string(tail), "end\n") {
		t.Errorf("%d bytes in %d gaps, stream ends at %d with %q: want a gap, the end at %d, \"end\" last", got, gaps, next, tail, size+4)
	}
}

// The exit event carries the feed head Options.Head reads once the command
// has ended; without one, or when reading it fails, the event has none.
func TestExitEventCarriesTheHead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		head     func(context.Context) (int64, error)
		wantHead bool
	}{
		{"head", func(context.Context) (int64, error) { return 42, nil }, true},
		{"no head reader", nil, false},
		{"read failed", func(context.Context) (int64, error) { return 0, errors.New("store closed") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			head := tc.head
			if head != nil {
				head = func(ctx context.Context) (int64, error) {
					// The command's last act is there when the head is read.
					if b, err := os.ReadFile(filepath.Join(root, "last")); err != nil || string(b) != "done\n" {
						t.Errorf("head read before the command ended: %q, %v", b, err)
					}
					return tc.head(ctx)
				}
			}
			r := newRigWith(t, execrun.Options{Root: root}, Options{Head: head})
			st, err := Start(context.Background(), r.session(t), Request{Shell: "echo done > last"})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			res := drain(t, st)
			if res.exit == nil {
				t.Fatal("no exit event")
			}
			if got := res.exit.HasHead; got != tc.wantHead {
				t.Errorf("exit has a head: %v, want %v", got, tc.wantHead)
			}
			if tc.wantHead && res.exit.Head != 42 {
				t.Errorf("head %d, want 42", res.exit.Head)
			}
		})
	}
}

func TestExitEventRoundTrip(t *testing.T) {
	for _, x := range []Exit{
		{Code: 0},
		{Code: -1, Signal: 9, Duration: time.Second, TimedOut: true, Killed: true},
		{Code: 3, HasHead: true, Head: 0},
		{Code: 3, HasHead: true, Head: 1 << 62},
	} {
		ev, err := DecodeEvent(AppendEvent(nil, Event{Offset: 9, Exit: &x}))
		if err != nil {
			t.Fatalf("%+v: %v", x, err)
		}
		if got := *ev.Exit; got != x {
			t.Errorf("round trip of %+v = %+v", x, got)
		}
	}
}

func TestDecodersRefuseGarbage(t *testing.T) {
	for _, p := range [][]byte{nil, {0xff}, AppendRequest(nil, Request{}), append(AppendRequest(nil, Request{Shell: "x"}), 0)} {
		if _, err := DecodeRequest(p); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeRequest(%x) = %v", p, err)
		}
	}
	if _, err := DecodeEvent([]byte{9, 0}); !errors.Is(err, ErrBadMessage) {
		t.Errorf("event with a bad tag: %v", err)
	}
	exit := AppendEvent(nil, Event{Exit: &Exit{HasHead: true, Head: 5}})
	for name, p := range map[string][]byte{
		"exit with a head flag and no head": exit[:len(exit)-1],
		"exit with trailing bytes":          append(exit, 0),
		"exit with an unknown flag":         {3, 0, 0, 0, 0, 8},
		"head beyond 2^62":                  AppendEvent(nil, Event{Exit: &Exit{HasHead: true, Head: 1<<62 + 1}}),
	} {
		if _, err := DecodeEvent(p); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s (%x): %v", name, p, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(AppendRequest(nil, Request{Argv: []string{"ls", "-l"}, Cwd: "src", Env: []string{"A=1"}, Stdin: []byte("x"), Timeout: time.Second, HasUser: true, Uid: 1000, Gid: 1000}))
	f.Add(AppendRequest(nil, Request{Shell: "echo hi"}))
	f.Add(AppendRequest(nil, Request{Shell: "make", LogCap: 4096}))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := DecodeRequest(p)
		if err != nil {
			return
		}
		r2, err := DecodeRequest(AppendRequest(nil, r))
		if err != nil || r2.Shell != r.Shell || len(r2.Argv) != len(r.Argv) || r2.Timeout != r.Timeout || r2.LogCap != r.LogCap {
			t.Fatalf("re-decode: %+v vs %+v, %v", r, r2, err)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(AppendEvent(nil, Event{Offset: 5, Stream: Stdout, Data: []byte("hi")}))
	f.Add(AppendEvent(nil, Event{Offset: 7, Exit: &Exit{Code: 130, Signal: 2, Killed: true}}))
	f.Add(AppendEvent(nil, Event{Offset: 7, Exit: &Exit{Code: 0, HasHead: true, Head: 1234}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		ev, err := DecodeEvent(p)
		if err != nil {
			return
		}
		if _, err := DecodeEvent(AppendEvent(nil, ev)); err != nil {
			t.Fatalf("re-decode %+v: %v", ev, err)
		}
	})
}
