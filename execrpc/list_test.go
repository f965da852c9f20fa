package execrpc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// List answers every running and retained exec of the runner, with its
// state, exit and log offsets, and the runtime they belong to; a request
// with a log cap gets a log of that size.
func TestListOverTheWire(t *testing.T) {
	r := newRig(t, execrun.Options{LogCap: 1 << 20})
	ctx := context.Background()
	s := r.session(t)
	// The output waits for the start's answer: 10 bytes into a log of 4
	// written before it would drop what the start's stream from 0 has
	// not read yet, and fail the start.
	gate := filepath.Join(t.TempDir(), "go")
	done, err := Start(ctx, s, Request{Argv: []string{"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done; printf 0123456789; exit 4`, "sh", gate}, LogCap: 4})
	if err != nil {
		t.Fatal(err)
	}
	done.Close() // its log of 4 bytes may drop what a stream from 0 has not read yet
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.runner.Wait(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	live, err := Start(ctx, s, Request{Shell: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	live.Close()
	t.Cleanup(func() { r.runner.Kill(live.ID, syscall.SIGKILL) })

	rt, list, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if rt != r.runner.RuntimeID() || len(list) != 2 || list[0].ID != done.ID || list[1].ID != live.ID {
		t.Fatalf("list of %q: %+v; want both execs of %q", rt, list, r.runner.RuntimeID())
	}
	d := list[0]
	if d.State != execrun.StateExited || d.Exit == nil || d.Exit.Code != 4 || d.LogStart != 6 || d.LogEnd != 10 || d.LogCap != 4 {
		t.Errorf("finished exec %+v: want exited 4, log [6, 10) cap 4", d)
	}
	if l := list[1]; l.State != execrun.StateRunning || l.Exit != nil || l.Shell != "sleep 30" || l.Started.IsZero() || !l.Ended.IsZero() {
		t.Errorf("running exec %+v", l)
	}
	if _, err := Start(ctx, s, Request{Shell: "true", LogCap: 2 << 20}); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("log cap above the runner's: %v, want EINVAL", err)
	}
}

// Attach from FromEnd sends no replay: the exit of a finished exec at
// once, at the end of its output.
func TestAttachFromEnd(t *testing.T) {
	r := newRig(t, execrun.Options{})
	ctx := context.Background()
	st, err := Start(ctx, r.session(t), Request{Shell: "printf abc; exit 2"})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, st)
	end, err := Attach(ctx, r.session(t), st.ID, FromEnd)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := end.Next(ctx)
	if err != nil || ev.Exit == nil || ev.Exit.Code != 2 || ev.Offset != 3 {
		t.Fatalf("first event from the end: %+v, %v; want the exit (code 2) at offset 3", ev, err)
	}
}

// A List answer with more execs than MaxListed is refused, not gathered.
func TestListIsBounded(t *testing.T) {
	ctx := context.Background()
	srv := rpc.NewServer(rpc.ServerOptions{})
	srv.Handle(MethodList, func(ctx context.Context, c *rpc.Incoming) error {
		if err := c.ReplyStream([]byte{0}); err != nil { // str(""): the runtime id
			return err
		}
		msg := AppendInfo(nil, Info{ID: "x:1", State: execrun.StateRunning})
		for range MaxListed + 1 {
			if err := c.Send(ctx, msg); err != nil {
				return err
			}
		}
		return nil
	})
	c := rpc.NewClient(rpc.ClientOptions{Dial: func(context.Context) (rpc.Conn, error) {
		client, _ := srv.Pipe()
		return client, nil
	}})
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	sess, _, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := List(ctx, sess); !errors.Is(err, ErrBadMessage) {
		t.Errorf("list of %d execs: %v, want ErrBadMessage", MaxListed+1, err)
	}
}

func infoSeeds() [][]byte {
	start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	return [][]byte{
		AppendInfo(nil, Info{ID: "rt:1", Argv: []string{"sleep", "30"}, Cwd: "src", Pid: 42, Started: start,
			State: execrun.StateRunning, LogEnd: 5, LogCap: 8 << 20}),
		AppendInfo(nil, Info{ID: "rt:2", Shell: "make", Truncated: true, Started: start, Ended: start.Add(time.Second),
			State: execrun.StateKilled, Exit: &Exit{Code: 143, Signal: 15, Killed: true, Duration: time.Second}, LogStart: 3, LogEnd: 9, LogCap: 4}),
	}
}

func attachSeeds() [][]byte {
	return [][]byte{appendAttach(nil, attachReq{ID: "rt:1", From: 7}), appendAttach(nil, attachReq{ID: "rt:1", From: FromEnd})}
}

func FuzzDecodeInfo(f *testing.F) {
	testutil.AddSeeds(f, infoSeeds())
	f.Fuzz(func(t *testing.T, p []byte) {
		testutil.RoundTrip(t, "info", p, DecodeInfo, func(in Info) []byte { return AppendInfo(nil, in) })
	})
}

func FuzzDecodeAttach(f *testing.F) {
	testutil.AddSeeds(f, attachSeeds())
	f.Fuzz(func(t *testing.T, p []byte) {
		testutil.RoundTrip(t, "attach", p, decodeAttach, func(a attachReq) []byte { return appendAttach(nil, a) })
	})
}

// TestWriteFuzzCorpus writes the seeds of the List and Attach decoders
// under testdata/fuzz (WSYNC_WRITE_CORPUS=1).
func TestWriteFuzzCorpus(t *testing.T) {
	testutil.WriteFuzzCorpus(t, map[string][][]byte{"FuzzDecodeInfo": infoSeeds(), "FuzzDecodeAttach": attachSeeds()})
}
