package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
)

// frames decodes an NDJSON body.
func frames(t *testing.T, body []byte) []Frame[json.RawMessage] {
	t.Helper()
	var out []Frame[json.RawMessage]
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var f Frame[json.RawMessage]
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		out = append(out, f)
	}
	return out
}

// A burst of progress becomes at most one frame per ProgressEvery, and the
// last progress always goes, before the result.
func TestProgressFramesAreThrottled(t *testing.T) {
	rec := httptest.NewRecorder()
	fw := newFrameWriter(rec)
	start := time.Now()
	const n = 100_000
	for i := 1; i <= n; i++ {
		fw.progress(workspace.Progress{Op: "pull", Entries: i, Batches: i})
	}
	finish(fw, "done", nil)
	elapsed := time.Since(start)
	fs := frames(t, rec.Body.Bytes())
	if len(fs) < 2 || fs[len(fs)-1].Type != FrameResult {
		t.Fatalf("frames %+v: want progress, then the result", fs)
	}
	progress := fs[:len(fs)-1]
	// One flush per ProgressEvery (and the last, by finish), each the
	// run's first totals and its latest at most.
	if max := 2 * (int(elapsed/ProgressEvery) + 2); len(progress) > max {
		t.Errorf("%d progress frames in %v, want at most %d", len(progress), elapsed, max)
	}
	prev := 0
	for _, f := range progress {
		if f.Type != FrameProgress || f.Progress == nil || f.Progress.Entries <= prev {
			t.Fatalf("frame %+v after entries %d", f, prev)
		}
		prev = f.Progress.Entries
	}
	if prev != n {
		t.Errorf("last progress frame says %d entries, want %d", prev, n)
	}
	if got := rec.Header().Get("Content-Type"); got != NDJSON {
		t.Errorf("Content-Type %q", got)
	}
}

// stuckWriter is a client that stopped reading: Write blocks until
// released.
type stuckWriter struct {
	*httptest.ResponseRecorder
	entered chan struct{}
	release chan struct{}
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.ResponseRecorder.Write(p)
}

// A reader that stopped reading holds up neither the sync's progress
// calls nor anything else: the progress goroutine waits alone.
func TestAStuckReaderDoesNotHoldUpProgress(t *testing.T) {
	w := &stuckWriter{ResponseRecorder: httptest.NewRecorder(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	fw := newFrameWriter(w)
	fw.progress(workspace.Progress{Op: "pull", Entries: 1, Batches: 1})
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first progress frame was never written")
	}
	done := make(chan struct{})
	go func() {
		for i := 2; i <= 10_000; i++ {
			fw.progress(workspace.Progress{Op: "pull", Entries: i, Batches: i})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("progress calls blocked on a client that does not read")
	}
	close(w.release)
	finish(fw, "done", nil)
	fs := frames(t, w.Body.Bytes())
	if len(fs) != 3 || fs[1].Progress == nil || fs[1].Progress.Entries != 10_000 || fs[2].Type != FrameResult {
		t.Errorf("%d frames after the reader came back, want 3: the first progress, the last, the result", len(fs))
	}

	// Progress that never makes a run of its own (no batches) is held
	// back within a bound.
	w = &stuckWriter{ResponseRecorder: httptest.NewRecorder(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	fw = newFrameWriter(w)
	for i := range 100_000 {
		fw.progress(workspace.Progress{Op: "pull", Entries: i})
	}
	if n := len(fw.pending); n > maxPending {
		t.Errorf("%d progress held back, want at most %d", n, maxPending)
	}
	close(w.release)
	finish(fw, "done", nil)
	// What one flush took before the writer stuck, what was held back
	// meanwhile, the result.
	if fs := frames(t, w.Body.Bytes()); len(fs) > 2*maxPending+1 || fs[len(fs)-2].Progress.Entries != 99_999 {
		t.Errorf("%d frames, the last progress %+v", len(fs), fs[len(fs)-2].Progress)
	}
}

// Held-back progress keeps the first and last totals of every run (a
// push's bootstrap and its push, a tick's pull and push per runtime), so
// the reader splits the runs as they were, even a run that starts where
// another of its op left off.
func TestEveryRunsLastProgressIsSent(t *testing.T) {
	rec := httptest.NewRecorder()
	fw := newFrameWriter(rec)
	var want []workspace.Progress
	for _, run := range []struct {
		op      string
		batches int
	}{{"bootstrap", 3}, {"push", 5}, {"pull", 4}, {"pull", 2}, {"push", 1}, {"push", 7}, {"pull", 1}} {
		var p workspace.Progress
		for b := range run.batches + 1 {
			p = workspace.Progress{Op: run.op, Batches: b, Entries: 10 * b}
			if b > 0 || run.op == "bootstrap" {
				fw.progress(p)
			}
		}
		want = append(want, p)
	}
	finish(fw, "done", nil)
	var got []workspace.Progress
	for _, f := range frames(t, rec.Body.Bytes()) {
		if f.Type == FrameProgress {
			if n := len(got); n > 0 && f.Progress.Follows(got[n-1]) {
				got[n-1] = *f.Progress
				continue
			}
			got = append(got, *f.Progress)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("runs' last progress:\n got  %v\n want %v", got, want)
	}
}

// An error before any frame is an ordinary JSON error response.
func TestStreamErrorBeforeAnyFrame(t *testing.T) {
	rec := httptest.NewRecorder()
	finish(newFrameWriter(rec), 0, workspace.ErrBusy)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Content-Type") == NDJSON {
		t.Errorf("status %d, Content-Type %q: want a JSON 429", rec.Code, rec.Header().Get("Content-Type"))
	}
	rec = httptest.NewRecorder()
	fw := newFrameWriter(rec)
	fw.progress(workspace.Progress{Op: "push", Entries: 3})
	finish(fw, 0, workspace.ErrBusy)
	fs := frames(t, rec.Body.Bytes())
	if len(fs) != 2 || fs[0].Type != FrameProgress || fs[1].Type != FrameError || fs[1].Errno != "EBUSY" {
		t.Errorf("frames %+v: want progress, then an EBUSY error frame", fs)
	}
}

func TestAcceptsNDJSON(t *testing.T) {
	for _, tc := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{NDJSON}, true},
		{[]string{"application/json, application/x-ndjson;q=0.9"}, true},
		{[]string{"text/plain", "Application/X-NDJSON"}, true},
		{[]string{"application/x-ndjsonx"}, false},
		{[]string{";;;,,,"}, false},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		for _, a := range tc.accept {
			r.Header.Add("Accept", a)
		}
		if got := acceptsNDJSON(r); got != tc.want {
			t.Errorf("Accept %q: %v, want %v", tc.accept, got, tc.want)
		}
	}
}

// flushCounter counts the flushes a stream asks of its response.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() {
	f.flushes++
	f.ResponseRecorder.Flush()
}

// A frame goes out as it is written; the last progress and the result, which
// finish writes, go with the end of the response: one write and one wake-up of
// the reader fewer for every call (an exec of `true` writes its started frame,
// then its result).
func TestFinishLeavesTheFlushToTheResponsesEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		started bool
	}{
		{"result after a frame", nil, true},
		{"error after a frame", fmt.Errorf("boom"), true},
		{"result alone", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
			fw := newFrameWriter(rec)
			want := 0
			if tc.started {
				fw.frame(ExecFrame{Type: "started"})
				want = 1
				if rec.flushes != want {
					t.Fatalf("a frame written: %d flushes, want %d", rec.flushes, want)
				}
			}
			fw.progress(workspace.Progress{Op: "pull", Entries: 1, Batches: 1})
			finish(fw, "done", tc.err)
			// The progress goroutine may have sent the progress before
			// finish stopped it: that frame is flushed as it goes.
			if rec.flushes > want+1 {
				t.Errorf("%d flushes, want at most %d: finish flushed its frames", rec.flushes, want+1)
			}
			fs := frames(t, rec.Body.Bytes())
			last := fs[len(fs)-1].Type
			if wantLast := map[bool]string{true: FrameError, false: FrameResult}[tc.err != nil]; last != wantLast {
				t.Errorf("frames %+v: want %s last", fs, wantLast)
			}
		})
	}
}
