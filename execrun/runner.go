package execrun

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Defaults for zero Options fields.
const (
	DefaultMaxRunning  = 16
	DefaultLogCap      = 8 << 20
	DefaultTimeout     = 10 * time.Minute
	DefaultMaxTimeout  = time.Hour
	DefaultKillGrace   = 2 * time.Second
	DefaultRetain      = 64
	DefaultRetainBytes = 64 << 20
	DefaultRetainFor   = time.Hour
)

// Options configure a Runner. Zero fields take the defaults above.
type Options struct {
	// Root is the mount root execs run under; required.
	Root string
	// RuntimeID fences exec ids: ids of any other runtime id are ErrExecLost.
	// Empty generates a random UUID, which is what a daemon wants: one per
	// process start.
	RuntimeID string
	// MaxRunning is the concurrency limit; Start beyond it is ErrBusy.
	MaxRunning int
	// LogCap is the most output bytes kept per exec; older bytes are
	// dropped. A Spec may ask for less (Spec.LogCap), never more.
	LogCap int64
	// DefaultTimeout applies when a Spec has none; MaxTimeout is the most a
	// Spec may ask for.
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when the runner
	// terminates a group (timeout, Shutdown).
	KillGrace time.Duration
	// Retain and RetainBytes bound the finished execs kept for re-attach: at
	// most Retain of them, holding at most RetainBytes of output together
	// (the newest is always kept). The oldest go first.
	Retain      int
	RetainBytes int64
	// RetainFor is how long a finished exec stays attachable after its
	// end (default DefaultRetainFor); Retain and RetainBytes may evict it
	// sooner.
	RetainFor time.Duration
	Logger    *slog.Logger
}

// Stats are the runner's counters since it started.
type Stats struct {
	Started  uint64 // execs forked
	Finished uint64 // execs ended and reaped
	Killed   uint64 // finished after a Kill or Shutdown signalled them
	TimedOut uint64 // finished after their timeout expired
	Busy     uint64 // Starts refused with ErrBusy
	Running  int    // started, not yet finished
	Retained int    // finished execs kept for re-attach
}

// Runner starts and tracks the execs of one runtime.
type Runner struct {
	opts Options
	root string // Options.Root, absolute with symlinks resolved
	log  *slog.Logger
	wg   sync.WaitGroup // one per started exec, done when it finishes
	// mountDev is the device of the file system mounted at root, when
	// root is a mount point (hasMountDev): binaries on it start through
	// the shim (exec.go).
	mountDev    uint64
	hasMountDev bool
	// noUnshare: unshare(CLONE_FS) was refused once; every command starts
	// through the shim.
	noUnshare atomic.Bool

	mu            sync.Mutex
	closed        bool
	seq           uint64
	execs         map[uint64]*Exec // running and retained
	retained      []*Exec          // finished, oldest first
	retainedBytes int64
	stats         Stats
}

// New returns a Runner for the mount at opts.Root. It makes the calling
// process a child subreaper (see the package doc) so that no exec leaves
// zombies behind.
func New(opts Options) (*Runner, error) {
	if opts.Root == "" {
		return nil, fmt.Errorf("exec runner: no root")
	}
	root, err := filepath.Abs(opts.Root)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("exec runner root: %w", err)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("exec runner root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("exec runner root %s: %w", root, syscall.ENOTDIR)
	}
	setDefault(&opts.RuntimeID, uuid.NewString())
	setDefault(&opts.MaxRunning, DefaultMaxRunning)
	setDefault(&opts.LogCap, DefaultLogCap)
	setDefault(&opts.DefaultTimeout, DefaultTimeout)
	setDefault(&opts.MaxTimeout, max(DefaultMaxTimeout, opts.DefaultTimeout))
	setDefault(&opts.KillGrace, DefaultKillGrace)
	setDefault(&opts.Retain, DefaultRetain)
	setDefault(&opts.RetainBytes, DefaultRetainBytes)
	setDefault(&opts.RetainFor, DefaultRetainFor)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultTimeout > opts.MaxTimeout {
		return nil, fmt.Errorf("exec runner: default timeout %v above the maximum %v", opts.DefaultTimeout, opts.MaxTimeout)
	}
	if opts.MaxRunning < 0 || opts.LogCap < 0 || opts.Retain < 0 || opts.RetainBytes < 0 ||
		opts.RetainFor < 0 || opts.DefaultTimeout < 0 || opts.KillGrace < 0 {
		return nil, fmt.Errorf("exec runner: negative limit in options")
	}
	r := &Runner{
		opts:  opts,
		root:  root,
		log:   opts.Logger.With("component", "execrun", "runtime", opts.RuntimeID),
		execs: make(map[uint64]*Exec),
	}
	r.mountDev, r.hasMountDev = mountDevice(root)
	if err := becomeSubreaper(); err != nil {
		r.log.Warn("cannot become child subreaper; orphans of execs go to init", "err", err)
	}
	return r, nil
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// RuntimeID is the id fencing this runner's exec ids.
func (r *Runner) RuntimeID() string { return r.opts.RuntimeID }

// Root is the mount root, absolute with symlinks resolved.
func (r *Runner) Root() string { return r.root }

// Start validates s and starts it in a new process group. ctx bounds only the
// start: the exec lives until it exits, times out, is killed, or Shutdown.
func (r *Runner) Start(ctx context.Context, s Spec) (*Exec, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := r.prepare(s)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if r.stats.Running >= r.opts.MaxRunning {
		r.stats.Busy++
		metricBusy.Inc()
		r.mu.Unlock()
		return nil, fmt.Errorf("%d execs running: %w", r.opts.MaxRunning, ErrBusy)
	}
	r.stats.Running++
	r.seq++
	seq := r.seq
	r.wg.Add(1)
	r.mu.Unlock()

	id := r.opts.RuntimeID + ":" + strconv.FormatUint(seq, 10)
	e := &Exec{
		r:      r,
		id:     id,
		seq:    seq,
		log:    r.log.With("exec", id),
		done:   make(chan struct{}),
		listed: make(chan struct{}),
		out:    outputLog{cap: c.logCap},
		info:   summarize(s, c),
	}
	if err := e.start(c, s.Stdin); err != nil {
		r.mu.Lock()
		r.stats.Running--
		r.mu.Unlock()
		r.wg.Done()
		return nil, err
	}
	e.log.Debug("exec started", "cmd", c.argv[0], "cwd", c.dir, "timeout", c.timeout)

	r.mu.Lock()
	r.execs[seq] = e
	r.stats.Started++
	closed := r.closed
	r.mu.Unlock()
	metricStarted.Inc()
	metricRunning.Inc()
	close(e.listed)
	if closed { // Shutdown began while we forked and did not see e
		e.terminate(false)
	}
	return e, nil
}

// retire moves a finished exec into retention, evicting the oldest beyond
// the bounds.
func (r *Runner) retire(e *Exec, st ExitStatus) {
	metricRunning.Dec()
	metricFinished.Inc()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Running--
	r.stats.Finished++
	if st.Killed {
		r.stats.Killed++
		metricKilled.Inc()
	}
	if st.TimedOut {
		r.stats.TimedOut++
		metricTimedOut.Inc()
	}
	r.retained = append(r.retained, e)
	r.retainedBytes += e.size
	for len(r.retained) > 1 && (len(r.retained) > r.opts.Retain || r.retainedBytes > r.opts.RetainBytes) {
		r.evictOldestLocked()
	}
	r.expireLocked()
}

// evictOldestLocked drops the oldest retained exec. r.mu is held.
func (r *Runner) evictOldestLocked() {
	old := r.retained[0]
	r.retained[0] = nil
	r.retained = r.retained[1:]
	r.retainedBytes -= old.size
	delete(r.execs, old.seq)
}

// expireLocked drops the retained execs that ended more than RetainFor
// ago. They are dropped when the runner is next asked (Lookup, List) or an
// exec ends, not on a timer: until then nobody can tell. r.mu is held.
func (r *Runner) expireLocked() {
	cutoff := time.Now().Add(-r.opts.RetainFor)
	for len(r.retained) > 0 && r.retained[0].ended.Before(cutoff) {
		r.evictOldestLocked()
	}
}

// Lookup finds an exec by id.
func (r *Runner) Lookup(id string) (*Exec, error) {
	rt, seqText, ok := cutLast(id, ":")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || rt == "" || err != nil {
		return nil, fmt.Errorf("exec %q: %w", id, ErrNotFound)
	}
	if rt != r.opts.RuntimeID {
		return nil, fmt.Errorf("exec %q: runtime is now %s: %w", id, r.opts.RuntimeID, ErrExecLost)
	}
	r.mu.Lock()
	r.expireLocked()
	e := r.execs[seq]
	r.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("exec %q: %w", id, ErrNotFound)
	}
	return e, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// Attach is Lookup then Exec.Attach.
func (r *Runner) Attach(id string, from int64) (*Subscription, error) {
	e, err := r.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.Attach(from)
}

// Kill is Lookup then Exec.Kill.
func (r *Runner) Kill(id string, sig syscall.Signal) error {
	e, err := r.Lookup(id)
	if err != nil {
		return err
	}
	return e.Kill(sig)
}

// Wait is Lookup then Exec.Wait.
func (r *Runner) Wait(ctx context.Context, id string) (ExitStatus, error) {
	e, err := r.Lookup(id)
	if err != nil {
		return ExitStatus{}, err
	}
	return e.Wait(ctx)
}

// Stats returns a snapshot of the counters.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Retained = len(r.retained)
	return s
}

// Shutdown refuses new execs, terminates the running ones (SIGTERM, SIGKILL
// after the grace) and waits for them to finish. If ctx ends first, every
// group left gets SIGKILL and Shutdown returns ctx's error. Finished execs
// stay attachable.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	var live []*Exec
	for _, e := range r.execs {
		if !e.finished() {
			live = append(live, e)
		}
	}
	r.mu.Unlock()
	for _, e := range live {
		e.terminate(false)
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, e := range live {
			e.Kill(syscall.SIGKILL)
		}
		return fmt.Errorf("exec runner shutdown: %w", ctx.Err())
	}
}
