package testutil

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Child is the test binary run again as a child process, for the tests
// that SIGKILL a store mid-operation: the child runs one test, with an
// environment variable that makes that test play the child's part.
type Child struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	lines  *bufio.Scanner
	out    strings.Builder // the stdout lines read so far
	stderr bytes.Buffer
}

// StartChild starts the test binary running only the test named run, with
// env ("KEY=value") added to its environment. Its stdin is a pipe left
// open, so a child may block reading it until it is killed. The child is
// killed and waited for in t.Cleanup.
func StartChild(t testing.TB, run, env string) *Child {
	t.Helper()
	c := &Child{cmd: exec.Command(os.Args[0], "-test.run=^"+run+"$")}
	c.cmd.Env = append(os.Environ(), env)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdout, err = c.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		stdin.Close()
		c.cmd.Wait()
	})
	c.lines = bufio.NewScanner(c.stdout)
	return c
}

// ReadUntil reads the child's stdout a line at a time until done returns
// true for one. When the child's stdout ends first it waits for the child
// and fails t, saying what the child wrote and that it exited before want.
func (c *Child) ReadUntil(t testing.TB, want string, done func(line string) bool) {
	t.Helper()
	for c.lines.Scan() {
		c.out.WriteString(c.lines.Text() + "\n")
		if done(c.lines.Text()) {
			return
		}
	}
	c.cmd.Wait()
	t.Fatalf("child exited before %s:\n%s%s", want, c.out.String(), c.stderr.String())
}

// Kill kills the child with SIGKILL (no deferred cleanup runs, no store is
// closed) and waits for it, discarding the rest of its stdout.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, c.stdout)
	c.cmd.Wait()
}
