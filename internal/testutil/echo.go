package testutil

import (
	"bufio"
	"fmt"
	"net"
	"testing"
)

// EchoSocket listens on the Unix socket path and answers each connection's
// first line with "echo:" and that line, until the test ends. The socket
// file stays when it stops: a test may have moved it.
func EchoSocket(t testing.TB, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprint(c, "echo:"+line)
			c.Close()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
}
