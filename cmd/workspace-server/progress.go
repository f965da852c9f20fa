package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// progressDelay is how long a call runs before progress shows.
const defaultProgressDelay = 500 * time.Millisecond

var progressDelay = defaultProgressDelay

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress shows "pulling... 3.2s" on a terminal while a long call runs and
// clears it when stop is called. On anything but a terminal it does
// nothing, so scripts and --json output stay clean. The server reports
// counts only at the end of a sync, so elapsed time is what there is to show.
func progress(w io.Writer, what string) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		delay := time.NewTimer(progressDelay) // quick calls show nothing
		defer delay.Stop()
		select {
		case <-done:
			return
		case <-delay.C:
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			fmt.Fprintf(w, "\r%s... %.1fs", what, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
