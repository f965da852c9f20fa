package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/wsync/wsync/workspace"
)

// NDJSON is the media type of the API's streams: exec's always, push,
// pull, tick and verify's when the request's Accept header names it.
const NDJSON = "application/x-ndjson"

// ProgressEvery bounds how often a stream carries progress: at most one
// frame per interval. A frame carries totals, so the ones left out lose
// nothing, and the last one always goes before the result.
const ProgressEvery = 100 * time.Millisecond

// acceptsNDJSON reports whether the request's Accept header names NDJSON.
func acceptsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == NDJSON {
				return true
			}
		}
	}
	return false
}

// synced answers a sync call (push, pull, tick, verify): its report as
// JSON, or, when the request accepts NDJSON, progress frames as its
// batches commit, then the report in a result frame (or an error frame).
func synced[R any](s *Server, w http.ResponseWriter, r *http.Request, call func(context.Context) (R, error)) {
	if !acceptsNDJSON(r) {
		rep, err := call(r.Context())
		respond(w, rep, err)
		return
	}
	fw := s.newFrameWriter(w)
	ctx, done := fw.callContext(r.Context())
	defer done()
	rep, err := call(workspace.WithProgress(ctx, fw.progress))
	finish(fw, rep, err)
}

// frameWriter writes NDJSON frames, sending the headers with the first.
// Each write must finish within the write timeout: a caller that stops
// reading for that long is gone, as one that closed the connection. After
// a failed write it drops the rest and cancels the call's context
// (callContext), so a command or sync whose caller stopped reading ends as
// if the caller had hung up, instead of holding its slot for ever.
//
// Progress never waits for the caller: progress only records the totals,
// and a goroutine of the writer's sends what it holds, at most once per
// ProgressEvery, so a slow reader holds up neither the sync (nor the
// workspace's FIFO behind it) nor anything but its own frames. Held back,
// a newer progress replaces an older one of its run (Progress.Follows),
// except the run's first: every run's first and last totals are sent, so a
// reader can tell the runs apart by the same rule. Every other frame goes
// after the progress held back, in order.
type frameWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration           // of each write; 0: none (tests)
	gone    context.CancelCauseFunc // the call's, once callContext made it

	mu      sync.Mutex // held while writing: started, failed, ending
	started bool
	failed  bool
	// ending: finish writes the stream's last frames unflushed; the end of
	// the response sends them with its final chunk, one write and one
	// wake-up of the reader fewer (an exec of a command without output
	// makes two writes, not three).
	ending bool

	pmu     sync.Mutex           // pending, first, seen, running
	pending []workspace.Progress // held back, in order
	first   bool                 // the last of pending starts its run: not to be replaced
	seen    workspace.Progress   // the latest progress recorded
	running bool
	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
}

func newFrameWriter(w http.ResponseWriter) *frameWriter {
	return &frameWriter{w: w, rc: http.NewResponseController(w),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// newFrameWriter is a frameWriter whose writes have the server's
// StreamWriteTimeout.
func (s *Server) newFrameWriter(w http.ResponseWriter) *frameWriter {
	f := newFrameWriter(w)
	f.timeout = s.opts.StreamWriteTimeout
	return f
}

// errStoppedReading is the cause of a call's cancellation when a write of
// its stream failed.
var errStoppedReading = errors.New("the caller stopped reading the stream")

// callContext is ctx, cancelled too when a write to the caller fails;
// done releases it. Call it before the call starts, once.
func (f *frameWriter) callContext(ctx context.Context) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	f.gone = cancel
	f.mu.Unlock()
	return ctx, func() { cancel(nil) }
}

// frame writes fr, after the progress held back.
func (f *frameWriter) frame(fr any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushLocked()
	f.writeLocked(fr)
}

// maxPending bounds the progress held back for a reader that does not
// read: two for each run the sync made meanwhile (a tick's, one pull and
// one push per runtime), and a cap for an observer whose runs never end.
const maxPending = 64

// progress records p for the progress goroutine (replacing the totals of
// its run held back, unless they are the run's first), starting it first.
func (f *frameWriter) progress(p workspace.Progress) {
	f.pmu.Lock()
	newRun := !p.Follows(f.seen)
	f.seen = p
	switch n := len(f.pending); {
	case n > 0 && (!newRun && !f.first || n >= maxPending):
		f.pending[n-1] = p
		f.first = f.first && newRun // a capped queue's tail is whatever came last
	default:
		f.pending = append(f.pending, p)
		f.first = newRun
	}
	if !f.running {
		f.running = true
		go f.sendProgress()
	}
	f.pmu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// sendProgress writes the newest progress when there is one, then rests
// for ProgressEvery, until finish stops it.
func (f *frameWriter) sendProgress() {
	defer close(f.stopped)
	for {
		select {
		case <-f.stop:
			return
		case <-f.wake:
		}
		f.mu.Lock()
		f.flushLocked()
		f.mu.Unlock()
		select {
		case <-f.stop:
			return
		case <-time.After(ProgressEvery):
		}
	}
}

// flushLocked writes the progress held back, if any. f.mu is held.
func (f *frameWriter) flushLocked() {
	f.pmu.Lock()
	ps := f.pending
	f.pending, f.first = nil, false
	f.pmu.Unlock()
	for i := range ps {
		f.writeLocked(Frame[struct{}]{Type: FrameProgress, Progress: &ps[i]})
	}
}

func (f *frameWriter) writeLocked(fr any) {
	if f.failed {
		return
	}
	if !f.started {
		f.started = true
		h := f.w.Header()
		h.Set("Content-Type", NDJSON)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		f.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(fr)
	if err == nil && f.timeout > 0 {
		// Also the deadline of the response's end, which sends what
		// finish leaves unflushed; net/http clears it once the response
		// is done, before the connection's next request.
		if derr := f.rc.SetWriteDeadline(time.Now().Add(f.timeout)); derr != nil && !errors.Is(derr, http.ErrNotSupported) {
			err = derr
		}
	}
	if err == nil {
		_, err = f.w.Write(append(b, '\n'))
	}
	if err == nil && !f.ending {
		err = f.rc.Flush()
	}
	if err != nil {
		f.failed = true
		if f.gone != nil {
			f.gone(fmt.Errorf("%w: %v", errStoppedReading, err))
		}
	}
}

// finish ends the stream after the call: it stops the progress goroutine,
// writes the last progress, then the result frame, or the error frame. An
// error before any frame is an ordinary JSON error response (its status
// tells), since nothing has been written yet. No frame follows: the caller
// returns from its handler right after, and the response's end flushes
// what finish wrote.
func finish[R any](f *frameWriter, rep R, err error) {
	f.pmu.Lock()
	running := f.running
	f.running = true // no goroutine starts from now on
	f.pmu.Unlock()
	close(f.stop)
	if running {
		<-f.stopped
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ending = true
	f.flushLocked()
	switch {
	case err != nil && !f.started:
		writeError(f.w, err)
	case err != nil:
		f.writeLocked(Frame[R]{Type: FrameError, Error: err.Error(), Errno: workspace.ErrnoName(err)})
	default:
		f.writeLocked(Frame[R]{Type: FrameResult, Result: &rep})
	}
}
