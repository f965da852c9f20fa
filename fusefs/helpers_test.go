package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
)

// Some checks run in a child process: a page fault on a mapping of the
// mount blocks the faulting thread until this process's server answers, and
// POSIX locks only conflict between processes. The child is this test
// binary, started with helperEnv naming what to do.
const helperEnv = "WSYNC_FUSEFS_HELPER"

var helpers = map[string]func(args []string) error{
	"mmap-write": helperMmapWrite,
	"mmap-read":  helperMmapRead,
	"fcntl-try":  helperFcntlTry,
	"hold-open":  helperHoldOpen,
}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		fn := helpers[name]
		if fn == nil {
			fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
			os.Exit(2)
		}
		if err := fn(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCmd is a child running helper name with args.
func helperCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	return cmd
}

// helperCmdAs is helper name run as uid:uid, from a copy of the test binary
// that user can execute (go test's build directory is 0700).
func helperCmdAs(t *testing.T, ctx context.Context, uid uint32, name string, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "helper")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	openUp(t, bin)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}

// runHelper runs helper name to completion and returns its output.
func runHelper(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := helperCmd(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// helperMmapWrite maps file (which must be at least len(data) long) shared
// and writable, writes data at offset 0 through the mapping, msyncs and
// unmaps.
func helperMmapWrite(args []string) error {
	path, data := args[0], []byte(args[1])
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	copy(mem, data)
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	if err := syscall.Munmap(mem); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return f.Close()
}

// helperMmapRead prints the first n bytes of file, read through a mapping.
func helperMmapRead(args []string) error {
	path := args[0]
	var n int
	fmt.Sscan(args[1], &n)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	defer syscall.Munmap(mem)
	_, err = os.Stdout.Write(mem)
	return err
}

// helperFcntlTry tries a non-blocking write lock on the whole file and
// prints "locked" or "busy".
func helperFcntlTry(args []string) error {
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	switch err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err {
	case nil:
		fmt.Print("locked")
	case syscall.EAGAIN, syscall.EACCES:
		fmt.Print("busy")
	default:
		return err
	}
	return nil
}

// helperHoldOpen writes args[1] to a new file args[0], prints "ready" and
// keeps the file open, unflushed, until its stdin closes.
func helperHoldOpen(args []string) error {
	f, err := os.Create(args[0])
	if err != nil {
		return err
	}
	if _, err := f.WriteString(args[1]); err != nil {
		return err
	}
	fmt.Println("ready")
	var b [1]byte
	os.Stdin.Read(b[:])
	return f.Close()
}

// sh runs a bash script with the mount as its working directory (cd'ed into
// by the shell, not by the fork: see go-fuse's notes on deadlocks) and
// returns its combined output; a failure fails the test.
func sh(t *testing.T, dir, script string) string {
	t.Helper()
	out, err := shErr(dir, script)
	if err != nil {
		t.Fatalf("%s\n%s: %v", script, out, err)
	}
	return out
}

func shErr(dir, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", "cd "+shellQuote(dir)+" && "+script)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "HOME="+os.TempDir(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// asUser runs argv as uid:gid and returns its output and error.
func asUser(uid, gid uint32, dir string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "cd "+shellQuote(dir)+" && exec \"$@\"", "bash")
	cmd.Args = append(cmd.Args, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// openUp lets other users reach the mount point through t.TempDir's 0700
// directories.
func openUp(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func stat(t *testing.T, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return st
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// storeFile reads a file's committed bytes from the store, by path.
func storeFile(t *testing.T, m *fusetest.Mount, rel string) string {
	t.Helper()
	b, err := m.Store.ReadFile(context.Background(), rel)
	if err != nil {
		t.Fatalf("store read %s: %v", rel, err)
	}
	return string(b)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, d, cond)
}
