package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runStatus(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("status", "status [--runtime NAME] [--json]", "  workspace-server status\n  workspace-server status --json | jq .remote.container.current_rev\n  workspace-server status --runtime gpu\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	asJSON := c.fs.Bool("json", false, "print the status as JSON")
	return c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		st, err := ws.Status(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(st)
		}
		printStatus(stdout, st)
		return nil
	})
}

func printStatus(w io.Writer, st workspace.Status) {
	fmt.Fprintf(w, "workspace:  %s\n", st.Workspace)
	if st.Endpoint != "" {
		fmt.Fprintf(w, "computerd:  %s\n", st.Endpoint)
	}
	fmt.Fprintf(w, "ignore:     [%s]\n", strings.Join(st.Ignore, ", "))
	fmt.Fprintf(w, "server:     rev %d (store %s)\n", st.Store.CurrentRev, st.Store.StoreID)
	if q := st.Quota; q != nil {
		fmt.Fprintf(w, "quota:      %s\n", describeQuota(*q))
	}
	if o := st.Ownership; o != nil {
		fmt.Fprintf(w, "owner:      %s (server %s, lease generation %d)\n", cmp.Or(o.Address, "this server"), o.Owner, o.Generation)
		fmt.Fprintf(w, "replica:    %s\n", describeReplica(*o))
	}
	switch r := st.Remote; {
	case r != nil:
		fmt.Fprintf(w, "remote:     %s, runtime %s\n", r.State, r.RuntimeID)
		fmt.Fprintf(w, "  server:    rev %d, pushed %s, fetched %s\n", r.Server.CurrentRev, cursor(r.Server.Push), cursor(r.Server.Fetch))
		fmt.Fprintf(w, "  container: rev %d, applied push %s\n", r.Container.CurrentRev, cursor(r.Container.AppliedPush))
		if r.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", r.LastError)
		}
	default:
		fmt.Fprintf(w, "remote:     unavailable: %s\n", st.RemoteError)
	}
	if p := st.Pending; p != nil {
		fmt.Fprintf(w, "PENDING:    %s\n", describePending(p))
	}
	if p := st.Abandoned; p != nil {
		fmt.Fprintf(w, "abandoned:  pending pull of exec %s (runtime %s changed before it could be retried)\n", p.ExecID, p.RuntimeID)
	}
	for _, x := range []struct {
		name string
		rec  *workspace.SyncRecord
	}{{"last push", st.LastPush}, {"last pull", st.LastPull}} {
		if x.rec == nil {
			continue
		}
		if x.rec.Error != "" {
			fmt.Fprintf(w, "%-11s %s ago, FAILED: %s\n", x.name+":", since(x.rec.At), x.rec.Error)
		} else {
			fmt.Fprintf(w, "%-11s %s ago, %s\n", x.name+":", since(x.rec.At), describe(x.rec.Report))
		}
	}
	if v := st.LastVerify; v != nil {
		verdict := "converged"
		if !v.Converged {
			verdict = "DIVERGED"
		}
		fmt.Fprintf(w, "verify:     %s, %s ago\n", verdict, since(v.CheckedAt))
	}
	if st.Conflicts > 0 {
		fmt.Fprintf(w, "conflicts:  %d open (see: workspace-server conflicts)\n", st.Conflicts)
	}
	if st.Trash.Entries > 0 {
		fmt.Fprintf(w, "trash:      %d entries, %s (see: workspace-server trash ls)\n", st.Trash.Entries, humanBytes(st.Trash.Bytes))
	}
	if st.Queued > 0 {
		fmt.Fprintf(w, "queued:     %d sync calls waiting\n", st.Queued)
	}
}

// describePending says what a runtime's pending pull is doing.
func describePending(p *workspace.PendingPull) string {
	what := "a pull"
	if p.ExecID != "" {
		what = "the pull after exec " + p.ExecID
	}
	done := ""
	if p.Pulled > 0 {
		done = fmt.Sprintf(", %d entries pulled so far", p.Pulled)
	}
	switch p.State {
	case workspace.PendingDeferred:
		return fmt.Sprintf("%s, deferred %s ago, runs in the background", what, since(p.Since))
	case workspace.PendingRunning:
		return fmt.Sprintf("%s, running in slices since %s ago%s", what, since(p.Since), done)
	case workspace.PendingQuota:
		return fmt.Sprintf("%s stopped %s ago by the workspace's quota%s; the container keeps the rest: %s (raise it: `workspace-server workspaces set-quota`)",
			what, since(p.Since), done, p.Error)
	case workspace.PendingPaused:
		return fmt.Sprintf("%s PAUSED %s ago%s, pushes and execs held back: %s", what, since(p.Since), done, p.Error)
	}
	return fmt.Sprintf("%s failed %s ago (%d attempts%s), retried in the background: %s (or run `workspace-server pull`)",
		what, since(p.Since), max(p.Attempts, 1), done, p.Error)
}

func cursor(c workspace.Cursor) string {
	if c.Path == nil {
		return fmt.Sprintf("%d", c.Rev)
	}
	return fmt.Sprintf("%d:%q", c.Rev, *c.Path)
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// describeReplica says how far the object store is behind the workspace.
func describeReplica(o workspace.OwnershipStatus) string {
	var s string
	if o.LagSeconds == 0 && o.OwedUploads == 0 {
		s = "caught up: the object store holds every commit"
	} else {
		s = fmt.Sprintf("%s behind, %d chunk uploads owed", time.Duration(o.LagSeconds*float64(time.Second)).Round(time.Millisecond), o.OwedUploads)
	}
	if !o.LastShipped.IsZero() {
		s += fmt.Sprintf("; last shipped %s ago", time.Since(o.LastShipped).Round(time.Second))
	}
	if o.ReplicaError != "" {
		s += "; last error: " + o.ReplicaError
	}
	return s
}
