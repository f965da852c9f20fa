package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/workspace"
)

// How progress shows: a run (one push, pull or bootstrap of a call; see
// workspace.Progress.Follows) shows once it has lasted progressDelay, so
// quick syncs show nothing, and off a terminal a line goes at most every
// lineEvery. Tests shorten them.
var (
	progressDelay = 500 * time.Millisecond
	lineEvery     = 2 * time.Second
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// quietFlag adds --quiet (env WSYNC_QUIET=1) to a verb that shows sync
// progress.
func (c *command) quietFlag() *bool {
	return c.fs.Bool("quiet", env("WSYNC_QUIET", "") == "1", "show no progress on stderr (env WSYNC_QUIET=1)")
}

// meter shows the progress of a call's syncs on w, the verb's stderr
// (never stdout: exec's output and --json stay clean). On a terminal each
// run gets a bar (progressbar): a real one when its total is known (a
// snapshot's records), a spinner with the counts otherwise. Elsewhere a
// run prints plain lines ("pull: 2,304 entries, 41.2 MiB, 18.3 MiB/s") at
// a modest rate, and its final line at its end. A nil meter (--quiet)
// shows nothing. Its methods run on the call's goroutine.
type meter struct {
	w   io.Writer
	tty bool

	active bool               // a run is going on
	run    workspace.Progress // its latest totals
	first  workspace.Progress // its first
	at     time.Time          // when its first came
	bar    *progressbar.ProgressBar
	line   time.Time // when its last plain line went (zero: none yet)
	said   bool      // the last plain line is the run's latest
}

func newMeter(w io.Writer, quiet bool) *meter {
	if quiet {
		return nil
	}
	return &meter{w: w, tty: isTerminal(w)}
}

// context is ctx with the meter as the progress observer of its calls.
func (m *meter) context(ctx context.Context) context.Context {
	if m == nil {
		return ctx
	}
	return workspace.WithProgress(ctx, m.observe)
}

// observe takes one progress report: the next of the run, or the start of
// another (the last one's shown to its end).
func (m *meter) observe(p workspace.Progress) {
	now := time.Now()
	if !m.active || !p.Follows(m.run) {
		m.end()
		m.active, m.first, m.at = true, p, now
	}
	m.run, m.said = p, false
	if now.Sub(m.at) < progressDelay {
		return
	}
	if m.tty {
		m.draw()
		return
	}
	if m.line.IsZero() || now.Sub(m.line) >= lineEvery {
		m.print(now)
	}
}

// end shows the run to its end: the bar's final state, left on its line,
// or the final plain line when lines were printed. Exec calls it before
// the command's output, so no bar shares a line with it; the call's end
// calls it too. A nil meter and a run that showed nothing do nothing.
func (m *meter) end() {
	if m == nil || !m.active {
		return
	}
	switch {
	case m.bar != nil:
		m.draw()
		m.bar.Finish()
		fmt.Fprintln(m.w)
	case !m.line.IsZero() && !m.said:
		m.print(time.Now())
	}
	m.active, m.bar, m.line = false, nil, time.Time{}
}

// draw updates the run's bar, making it first.
func (m *meter) draw() {
	p := m.run
	if m.bar == nil {
		max := int64(-1)
		if p.Total > 0 {
			max = int64(p.Total)
		}
		// The bar's clock starts when it shows, progressDelay into the
		// run: a spinner shows no elapsed time (the rate says it), a bar
		// of known total its time left.
		m.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(m.w),
			progressbar.OptionSetElapsedTime(false),
			progressbar.OptionUseANSICodes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetRenderBlankState(false),
		)
	}
	n := p.Entries
	if p.Total > 0 {
		n = min(n, p.Total)
	}
	m.bar.Describe(m.describe(time.Now()))
	m.bar.Set64(int64(n))
}

// print writes the run's plain line.
func (m *meter) print(now time.Time) {
	fmt.Fprintln(m.w, m.describe(now))
	m.line, m.said = now, true
}

// describe is the run's counts and rate: "pull: 2,304 entries, 41.2 MiB,
// 18.3 MiB/s"; a run of known total counts "4,500/10,001 records".
func (m *meter) describe(now time.Time) string {
	p := m.run
	s := fmt.Sprintf("%s: %s entries", p.Op, humanize.Comma(int64(p.Entries)))
	if p.Total > 0 {
		s = fmt.Sprintf("%s: %s/%s records", p.Op, humanize.Comma(int64(p.Entries)), humanize.Comma(int64(p.Total)))
	}
	s += ", " + humanBytes(p.Bytes)
	// The rate is from the run's first report on: what came before it
	// took an unknown time.
	if d := now.Sub(m.at).Seconds(); d > 0 && p.Batches > m.first.Batches {
		if p.Bytes > m.first.Bytes {
			s += ", " + humanBytes(int64(float64(p.Bytes-m.first.Bytes)/d)) + "/s"
		} else {
			s += fmt.Sprintf(", %s entries/s", humanize.Comma(int64(float64(p.Entries-m.first.Entries)/d)))
		}
	}
	return s
}
