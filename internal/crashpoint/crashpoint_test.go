package crashpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// The child half of TestHitKillsAtTheNthHit: it passes the point five
// times, printing before each pass.
func TestMain(m *testing.M) {
	if os.Getenv("CRASHPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			fmt.Printf("pass %d\n", i)
			Hit("other")
			Hit("point")
		}
		fmt.Println("survived")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHitKillsAtTheNthHit(t *testing.T) {
	for _, tc := range []struct {
		env      string
		lastPass string // the last line printed
		killed   bool
	}{
		{"", "survived", false},
		{"point", "pass 1", true},
		{"point:3", "pass 3", true},
		{"point:9", "survived", false},
		{"elsewhere:1", "survived", false},
		{"point:0", "survived", false}, // refused, with a message
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", Env+"="+tc.env)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if got := lines[len(lines)-1]; got != tc.lastPass {
			t.Errorf("%s=%q: last line %q, want %q", Env, tc.env, got, tc.lastPass)
		}
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if killed != tc.killed {
			t.Errorf("%s=%q: killed = %v (%v), want %v", Env, tc.env, killed, err, tc.killed)
		}
		if tc.killed && !strings.Contains(stderr.String(), "crashpoint: point hit") {
			t.Errorf("%s=%q: stderr %q does not name the point", Env, tc.env, stderr.String())
		}
	}
}
