package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
	"github.com/wsync/wsync/workspace/events"
)

func runEvents(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("events", "events [--json] [--after ID] [--types LIST]",
		"  workspace-server events                          # follow from now until Ctrl-C\n"+
			"  workspace-server events --after 0 --types sync   # every sync event still retained, then follow\n"+
			"  workspace-server events --json | jq -c 'select(.type == \"sync.finished\") | .data'\n"+
			"\nOne line per event: time, type, runtime, a summary; --json prints each event's JSON object.\n"+
			"A dropped connection is opened again from the last event seen, so nothing the server still\n"+
			"retains is missed; a \"gap\" line says what was (after a server restart, say).\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print each event as its JSON object, one per line")
	after := c.fs.String("after", "", "follow from the event after ID (an event's id; 0: every event the server retains; default: from now)")
	types := c.fs.String("types", "", "only these event types or families, comma-separated (sync, exec, sync.finished, runtime, ...)")
	var list []string
	check := func(pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if *types == "" {
			return nil
		}
		_, err := events.ParseFilter(*types, workspace.EventTypes)
		list = strings.Split(*types, ",")
		return err
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		err := ws.EventsOf(ctx, *after, list, func(ev events.Event) error {
			var err error
			if *asJSON {
				_, err = fmt.Fprintf(stdout, "%s\n", ev.JSON())
			} else {
				_, err = fmt.Fprintln(stdout, eventLine(ev))
			}
			return err
		})
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil // interrupted: the way this verb ends
		}
		return err
	})
}

// eventLine is an event as one readable line: time, type, runtime, a
// summary of its data.
func eventLine(ev events.Event) string {
	rt := ev.Runtime
	if rt == "" {
		rt = "-"
	}
	return fmt.Sprintf("%s  %-20s  %-8s  %s", ev.Time.Local().Format("2006-01-02 15:04:05.000"), ev.Type, rt, eventSummary(ev))
}

// eventSummary says in a few words what an event's data says; data it
// cannot read is shown as it is.
func eventSummary(ev events.Event) string {
	var s string
	var err error
	switch ev.Type {
	case workspace.EventSyncStarted:
		s, err = summarise(ev.Data, func(d workspace.SyncStarted) string {
			return fmt.Sprintf("%s #%d started%s", d.Op, d.Sync, inTick(d.Parent))
		})
	case workspace.EventSyncProgress:
		s, err = summarise(ev.Data, func(d workspace.SyncProgress) string {
			entries := fmt.Sprint(d.Entries)
			if d.Total > 0 {
				entries += fmt.Sprintf("/%d", d.Total)
			}
			return fmt.Sprintf("%s #%d: %s entries, %d objects (%s), %d batches", d.Op, d.Sync, entries, d.Objects, humanBytes(d.Bytes), d.Batches)
		})
	case workspace.EventSyncFinished:
		s, err = summarise(ev.Data, func(d workspace.SyncFinished) string {
			if d.Error != "" {
				return fmt.Sprintf("%s #%d failed: %s", d.Op, d.Sync, d.Error)
			}
			s := fmt.Sprintf("%s #%d: %s", d.Op, d.Sync, describe(d.SyncReport))
			if d.More {
				s += "; more to pull"
			}
			return s
		})
	case workspace.EventExecStarted:
		s, err = summarise(ev.Data, func(d workspace.ExecStarted) string {
			cmd := d.Shell
			if cmd == "" {
				cmd = strings.Join(d.Argv, " ")
			}
			if d.ArgvTruncated {
				cmd += " ..."
			}
			return strings.TrimSpace(fmt.Sprintf("%s %s (in %s)", d.ExecID, cmd, cmp.Or(d.Cwd, "/")))
		})
	case workspace.EventExecExited:
		s, err = summarise(ev.Data, func(d workspace.ExecExited) string {
			switch {
			case d.Error != "":
				return fmt.Sprintf("%s: %s", d.ExecID, d.Error)
			case d.Signal != 0:
				return fmt.Sprintf("%s killed by signal %d after %v", d.ExecID, d.Signal, d.Duration.Round(time.Millisecond))
			}
			return fmt.Sprintf("%s exited %d after %v", d.ExecID, d.ExitCode, d.Duration.Round(time.Millisecond))
		})
	case workspace.EventPending:
		s, err = summarise(ev.Data, func(d workspace.PendingEvent) string {
			return fmt.Sprintf("a pull is pending%s: %s", forExec(d.ExecID), d.Error)
		})
	case workspace.EventPendingCleared:
		s, err = summarise(ev.Data, func(d workspace.PendingEvent) string {
			return fmt.Sprintf("the pending pull%s is %s", forExec(d.ExecID), d.Outcome)
		})
	case workspace.EventConflict:
		s, err = summarise(ev.Data, func(d workspace.ConflictEvent) string {
			return fmt.Sprintf("pull #%d recorded %s: %s", d.Sync, conflictCount(d.Conflicts), strings.Join(d.Paths, " "))
		})
	case workspace.EventVerify:
		s, err = summarise(ev.Data, func(d workspace.VerifyEvent) string {
			what := "verify"
			if d.Repair {
				what = "repair"
			}
			switch {
			case d.Error != "":
				return what + " failed: " + d.Error
			case d.Converged:
				return what + ": converged"
			}
			return what + ": diverged: " + strings.Join(d.Differences, " ")
		})
	case workspace.EventConnected:
		s, err = summarise(ev.Data, func(d workspace.RuntimeEvent) string { return "connected to computerd " + d.RuntimeID })
	case workspace.EventLost:
		s, err = summarise(ev.Data, func(d workspace.RuntimeEvent) string {
			return strings.TrimSpace("lost computerd " + d.RuntimeID + ": " + d.Error)
		})
	case events.TypeGap:
		s, err = summarise(ev.Data, func(d events.Gap) string {
			missed := "some events"
			if d.Missed > 0 {
				missed = fmt.Sprintf("%d events", d.Missed)
			}
			why := "they are no longer retained"
			if d.Reason == events.GapRestart {
				why = "the server restarted"
			}
			return fmt.Sprintf("missed %s (%s); going on from %s", missed, why, cmp.Or(d.Oldest, "the next one"))
		})
	default:
		return string(ev.Data)
	}
	if err != nil {
		return string(ev.Data)
	}
	return s
}

// summarise decodes data as a T and says it with f.
func summarise[T any](data json.RawMessage, f func(T) string) (string, error) {
	var d T
	if err := json.Unmarshal(data, &d); err != nil {
		return "", err
	}
	return f(d), nil
}

func inTick(parent uint64) string {
	if parent == 0 {
		return ""
	}
	return fmt.Sprintf(" (in tick #%d)", parent)
}

func forExec(id string) string {
	if id == "" {
		return ""
	}
	return " for exec " + id
}
