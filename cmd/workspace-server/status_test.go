package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
)

// TestStatusShowsReplication: status names the owner of a shared
// workspace and how far the object store is behind it.
func TestStatusShowsReplication(t *testing.T) {
	for _, c := range []struct {
		name string
		o    workspace.OwnershipStatus
		want []string
	}{
		{"caught up", workspace.OwnershipStatus{Owner: "id-a", Address: "http://a:8080", Generation: 3, LastShipped: time.Now()},
			[]string{"owner:      http://a:8080 (server id-a, lease generation 3)", "replica:    caught up"}},
		{"behind", workspace.OwnershipStatus{Owner: "id-a", Generation: 1, LagSeconds: 2.5, OwedUploads: 7, ReplicaError: "dial tcp: refused"},
			[]string{"replica:    2.5s behind, 7 chunk uploads owed; last error: dial tcp: refused"}},
	} {
		var b strings.Builder
		printStatus(&b, workspace.Status{Workspace: "proj", Ownership: &c.o})
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: status lacks %q:\n%s", c.name, w, b.String())
			}
		}
	}
	var b strings.Builder
	printStatus(&b, workspace.Status{Workspace: "proj"})
	if strings.Contains(b.String(), "replica:") {
		t.Errorf("a workspace on local disk only shows a replica:\n%s", b.String())
	}
}
