package remote

import (
	"testing"

	"github.com/wsync/wsync/execrpc"
	"github.com/wsync/wsync/workspace"
)

// The workspace checks exec requests against the container's limits before
// it pushes; those limits are execrpc's.
func TestExecLimitsMatchTheWire(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"stdin", workspace.MaxExecStdin, execrpc.MaxStdin},
		{"args", workspace.MaxExecArgs, execrpc.MaxArgs},
		{"string", workspace.MaxExecStrLen, execrpc.MaxStrLen},
	} {
		if c.got != c.want {
			t.Errorf("workspace %s limit %d, execrpc's %d", c.name, c.got, c.want)
		}
	}
}
