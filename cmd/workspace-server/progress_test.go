package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/workspace"
)

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

// drain reads r to its end (EOF, or EIO from a pty master whose slave
// closed) and returns what it read on the channel.
func drain(r io.Reader) <-chan string {
	out := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, err := io.Copy(&b, r)
		if err != nil && !errors.Is(err, syscall.EIO) {
			b.WriteString("\nREAD ERROR: " + err.Error())
		}
		out <- b.String()
	}()
	return out
}

func received(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("the reader never finished")
		return ""
	}
}

// showAtOnce makes every run show from its first report, and a plain
// line go for every report.
func showAtOnce(t *testing.T) {
	d, e := progressDelay, lineEvery
	progressDelay, lineEvery = 0, 0
	t.Cleanup(func() { progressDelay, lineEvery = d, e })
}

// containerFiles writes n files into the default workspace's container.
func (c *cli) containerFiles(dir string, n int) {
	c.t.Helper()
	c.ok("", "pull") // builds the fake; owes nothing after it
	fake := c.srv.Remotes.Fake("default")
	ctx := context.Background()
	if err := fake.Container.MkdirPath(ctx, dir, 0o755, true); err != nil {
		c.t.Fatal(err)
	}
	for i := range n {
		if _, err := fake.Container.WriteFile(ctx, fmt.Sprintf("%s/f%04d", dir, i), fmt.Appendf(nil, "file %d", i), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
}

// runWith runs the CLI with stderr going to errw.
func (c *cli) runWith(errw io.Writer, args ...string) (int, string) {
	var out bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, errw)
	return code, out.String()
}

var progressLine = regexp.MustCompile(`^pull: ([0-9,]+) entries, [0-9.]+ (B|[KMGTPE]iB)(, ([0-9.]+ (B|[KMGTPE]iB)|[0-9,]+ entries)/s)?$`)

// On a pipe: plain lines, the last one the pull's totals, and stdout
// holds the JSON report alone.
func TestProgressOnAPipe(t *testing.T) {
	showAtOnce(t)
	c := newCLI(t, nil)
	c.containerFiles("in", 1500)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := drain(r)
	code, stdout := c.runWith(w, "pull", "--json")
	w.Close()
	stderr := received(t, got)
	if code != 0 {
		t.Fatalf("pull: exit %d\n%s", code, stderr)
	}
	var rep workspace.SyncReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report alone: %v\n%s", err, stdout)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	prev := -1
	for _, l := range lines {
		m := progressLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("stderr line %q is not a progress line (%q)", l, stderr)
		}
		n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		if n <= prev {
			t.Errorf("entries went from %d to %d", prev, n)
		}
		prev = n
	}
	if prev != rep.Entries+rep.Skipped || rep.Batches < 5 {
		t.Errorf("the last line says %d entries, the report %+v", prev, rep)
	}
	if strings.ContainsAny(stderr, "\r\x1b") {
		t.Errorf("terminal control codes on a pipe: %q", stderr)
	}
}

// On a terminal: a bar (a spinner with the counts: a pull's total is not
// known) that ends on its own line; stdout holds the summary alone.
func TestProgressOnATerminal(t *testing.T) {
	showAtOnce(t)
	c := newCLI(t, nil)
	c.containerFiles("in", 1500)
	master, slave := openPTY(t)
	got := drain(master)
	code, stdout := c.runWith(slave, "pull")
	slave.Close()
	screen := received(t, got)
	if code != 0 {
		t.Fatalf("pull: exit %d\n%q", code, screen)
	}
	if !strings.HasPrefix(stdout, "pulled 1501 entries") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("stdout %q: want the summary alone", stdout)
	}
	if !strings.Contains(screen, "pull: 1,501 entries") || !strings.Contains(screen, "\r") || !strings.HasSuffix(screen, "\r\n") {
		t.Errorf("no bar ending on its line with the final count on the terminal: %q", screen)
	}
}

// A run whose total is known (a snapshot bootstrap) draws a real bar.
func TestProgressBarOfAKnownTotal(t *testing.T) {
	showAtOnce(t)
	master, slave := openPTY(t)
	got := drain(master)
	m := newMeter(slave, false)
	if !m.tty {
		t.Fatal("a pty slave is not taken for a terminal")
	}
	for i := range 5 {
		m.observe(workspace.Progress{Op: "bootstrap", Entries: 2500 * i, Objects: 2500 * i, Bytes: int64(i) << 24, Batches: i, Total: 10_000})
	}
	m.observe(workspace.Progress{Op: "push", Entries: 3, Batches: 1}) // the next run ends the bar
	m.end()
	slave.Close()
	screen := received(t, got)
	for _, want := range []string{"50%", "100%", "bootstrap: 5,000/10,000 records, 32.0 MiB", "bootstrap: 10,000/10,000 records, 64.0 MiB", "push: 3 entries"} {
		if !strings.Contains(screen, want) {
			t.Errorf("no %q on the terminal: %q", want, screen)
		}
	}
}

// exec: stdout holds the command's output alone; a bar never shares a
// line with it.
func TestExecProgressStaysOnStderr(t *testing.T) {
	showAtOnce(t)
	c := newCLI(t, nil)
	c.ok("", "pull")
	fake := c.srv.Remotes.Fake("default")
	for i := range 600 {
		if _, err := fake.Server.WriteFile(context.Background(), fmt.Sprintf("s%03d", i), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	master, slave := openPTY(t)
	got := drain(master)
	code, stdout := c.runWith(slave, "exec", "--", "warn", "oops")
	slave.Close()
	screen := received(t, got)
	if code != 0 || stdout != "" {
		t.Fatalf("exec: exit %d, stdout %q", code, stdout)
	}
	if !strings.Contains(screen, "push: 600 entries") || !strings.Contains(screen, "\r\noops\r\n") {
		t.Errorf("the push's bar and the command's stderr: %q", screen)
	}
}

// --quiet, and its environment twin, show nothing.
func TestQuietShowsNoProgress(t *testing.T) {
	showAtOnce(t)
	c := newCLI(t, nil)
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"pull", "--quiet"}},
		{"1", []string{"pull"}},
		{"", []string{"exec", "--quiet", "--", "echo", "hi"}},
		{"", []string{"verify", "--repair", "--quiet"}},
		{"", []string{"tick", "--quiet"}},
	} {
		c.containerFiles(fmt.Sprintf("q%d", len(tc.args)), 300)
		t.Setenv("WSYNC_QUIET", tc.env)
		var stderr bytes.Buffer
		if code, _ := c.runWith(&stderr, tc.args...); code != 0 || stderr.Len() != 0 {
			t.Errorf("%q (WSYNC_QUIET=%q): exit %d, stderr %q", tc.args, tc.env, code, stderr.String())
		}
	}
	t.Setenv("WSYNC_QUIET", "")
	c.containerFiles("loud", 300)
	var stderr bytes.Buffer
	if code, _ := c.runWith(&stderr, "pull"); code != 0 || !strings.Contains(stderr.String(), "pull: 301 entries") {
		t.Errorf("pull without --quiet: exit %d, stderr %q", code, stderr.String())
	}
}
