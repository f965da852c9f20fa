package tests

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
)

// TestSpecialFilesStayInContainer: FIFOs, a Unix socket and a device node
// made in the container work there and never reach the server; the Merkle
// roots still agree; a file made where one was syncs as a delete; a
// directory rename syncs its files only; a server write replaces a FIFO.
func TestSpecialFilesStayInContainer(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`echo synced > f`)
	if got := p.ok("read", "/f"); got != "synced\n" {
		t.Fatalf("read /f = %q", got)
	}
	if got := p.sh(`rm f && mkfifo f && mkdir run && echo keep > run/a && mkfifo run/fifo && mknod run/null c 1 3 &&
		stat -c %F f run/fifo run/null && (cat /dev/null > run/null 2>/dev/null || echo nodev)`); got != "fifo\nfifo\ncharacter special file\nnodev\n" {
		t.Fatalf("special files in the container: %q", got)
	}
	testutil.EchoSocket(t, filepath.Join(p.mount, "run", "s.sock"))
	p.sh(`true`) // one more sync: the socket exists now
	if _, ok := p.stat("/f"); ok {
		t.Error("/f survives rm f; mkfifo f on the server")
	}
	var names []string
	for _, fi := range p.ls("/run", false) {
		names = append(names, fi.Path)
	}
	if got := strings.Join(names, " "); got != "/run/a" {
		t.Errorf("ls /run on the server = %q, want only /run/a", got)
	}
	if r := p.cli("", "verify"); r.code != 0 || !strings.Contains(r.stdout, "converged") {
		t.Errorf("verify with special files in the container: %+v", r)
	}

	p.sh(`mv run run2`)
	names = names[:0]
	for _, fi := range p.ls("/run2", false) {
		names = append(names, fi.Path)
	}
	if got := strings.Join(names, " "); got != "/run2/a" {
		t.Errorf("ls /run2 after the rename = %q, want only /run2/a", got)
	}
	if _, ok := p.stat("/run"); ok {
		t.Error("/run survives its rename on the server")
	}
	c, err := net.Dial("unix", filepath.Join(p.mount, "run2", "s.sock"))
	if err != nil {
		t.Fatalf("connect after the directory moved: %v", err)
	}
	fmt.Fprintln(c, "ping")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "echo:ping\n" {
		t.Errorf("exchange over the moved socket: %q %v", line, err)
	}
	c.Close()

	p.cli("from the server\n", "write", "/run2/fifo", "-")
	if got := p.sh(`stat -c %F run2/fifo && timeout 10 cat run2/fifo`); got != "regular file\nfrom the server\n" {
		t.Errorf("a server write over a container FIFO: %q", got)
	}
	if r := p.cli("", "verify"); r.code != 0 || !strings.Contains(r.stdout, "converged") {
		t.Errorf("verify at the end: %+v", r)
	}
}
