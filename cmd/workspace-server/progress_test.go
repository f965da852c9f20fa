package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestProgressIsSilentOffATerminal(t *testing.T) {
	var buf bytes.Buffer
	progressDelay = 0 // a terminal would see a line at once
	defer func() { progressDelay = defaultProgressDelay }()
	stop := progress(&buf, "pulling")
	stop()
	if buf.Len() != 0 {
		t.Errorf("progress wrote %q to a non-terminal", buf.String())
	}
}

// openPTY returns a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

func TestProgressShowsElapsedOnATerminal(t *testing.T) {
	master, slave := openPTY(t)
	stop := progress(slave, "pulling")
	var got strings.Builder
	buf := make([]byte, 256)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(got.String(), "pulling... ") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line on the terminal: %q", got.String())
		}
		master.SetReadDeadline(deadline)
		n, err := master.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(buf[:n])
	}
	stop()
}
