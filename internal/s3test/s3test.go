// Package s3test starts a real S3-compatible server for tests: Versity's
// versitygw over a POSIX directory, on a loopback port, with a bucket made
// for the test. .ci/s3server builds the binary from the Go module proxy;
// tests find it through WSYNC_VERSITYGW, then PATH, then the cache the
// script fills. Without it a test skips, or fails when WSYNC_REQUIRE_S3=1
// (as CI sets).
package s3test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
)

// Access and Secret are the root credentials every test server runs with.
const (
	Access = "wsync-test-access"
	Secret = "wsync-test-secret-key"
)

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Bucket   string
	Root     string // the POSIX directory: Root/Bucket/<key>
	bin      string
	port     string
	cmd      *exec.Cmd
	t        testing.TB
}

// Binary finds versitygw, or skips (fails under WSYNC_REQUIRE_S3=1).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("WSYNC_VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	dir := os.Getenv("WSYNC_TOOLS")
	if dir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".cache", "wsync-tools")
		}
	}
	if p := filepath.Join(dir, "versitygw"); dir != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("WSYNC_REQUIRE_S3") == "1" {
		t.Fatal("versitygw not found (WSYNC_REQUIRE_S3=1): run .ci/s3server")
	}
	t.Skip("versitygw not found: run .ci/s3server to build it (WSYNC_VERSITYGW names it)")
	return ""
}

// Start runs a server with one bucket, stopped at cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Bucket: "wsync", Root: t.TempDir(), bin: Binary(t), t: t}
	if err := os.Mkdir(filepath.Join(s.Root, s.Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s.port = freePort(t)
	s.Endpoint = "http://127.0.0.1:" + s.port
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	// --keep-alive: versitygw answers with Connection: close otherwise,
	// which no production S3 does; every request would pay a connect, and
	// a catch-up of thousands of chunks would leave as many sockets in
	// TIME_WAIT.
	cmd := exec.Command(s.bin, "--access", Access, "--secret", Secret, "--port", "127.0.0.1:"+s.port, "--keep-alive", "--quiet", "posix", s.Root)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	s.cmd = cmd
	testutil.WaitFor(s.t, "versitygw listening on "+s.Endpoint, 30*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+s.port, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// Stop kills the server (idempotent).
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a stopped server again on the same port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Pause and Resume stop and continue the server (SIGSTOP, SIGCONT): an
// object store that hangs rather than refuses.
func (s *Server) Pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// URL is the object store URL of prefix in the test bucket.
func (s *Server) URL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1", s.Bucket, prefix, s.Endpoint)
}

// Env sets the credentials the AWS SDK reads for the rest of the test.
func (s *Server) Env(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", Secret)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	// The test server speaks plain HTTP; a CA bundle from the machine's
	// environment only trips litestream's client (replica's doc).
	t.Setenv("AWS_CA_BUNDLE", "")
}

// Environ is the same credentials as KEY=VALUE pairs for a child process.
func (s *Server) Environ() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + Access, "AWS_SECRET_ACCESS_KEY=" + Secret, "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_CA_BUNDLE="}
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}
