package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

const trashSynopsis = "trash ls [--json] [--limit N] [PATH] | trash restore PATH [--at TIME] [--force] | trash purge [PATH] [--older-than D]"

func runTrash(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "ls":
			return runTrashLs(ctx, args[1:], stdout, stderr)
		case "restore":
			return runTrashRestore(ctx, args[1:], stdout, stderr)
		case "purge":
			return runTrashPurge(ctx, args[1:], stdout, stderr)
		}
	}
	c := newCommand("trash", trashSynopsis, trashExample, stdout, stderr)
	if _, code, ok := c.parse(args, true); !ok {
		return code
	}
	return c.usageError("want ls, restore or purge")
}

const trashExample = `  workspace-server exec -- rm -rf src        # a pull trashes every file below src
  workspace-server trash ls /src              # what the trash holds under /src, newest first
  workspace-server trash restore /src         # bring the whole subtree back; the next push syncs it
  workspace-server push
  workspace-server trash restore /a.txt --at 2026-12-02T15:04:05Z --force   # an older version over the live one
  workspace-server trash purge --older-than 1h

The trash keeps what a pull or the files API deleted or overwrote, for the server's
--trash-retention (default 24h) within --trash-max-bytes; a version costs its manifest,
not a copy of its bytes.
`

// optPath is the check of a verb that takes at most one PATH.
func optPath(pos []string) error {
	switch len(pos) {
	case 0:
		return nil
	case 1:
		return checkPath(pos[0])
	}
	return errors.New("want at most one PATH")
}

func runTrashLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("trash ls", "trash ls [--json] [--limit N] [PATH]",
		"  workspace-server trash ls               # everything, newest first\n"+
			"  workspace-server trash ls /src --json   # under /src, as JSON\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the versions as JSON")
	limit := c.fs.Int("limit", 1000, fmt.Sprintf("list at most the newest N (up to %d)", workspace.MaxTrashList))
	return c.clientVerb(ctx, args, cf, optPath, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		path := "/"
		if len(pos) == 1 {
			path = pos[0]
		}
		list, err := ws.TrashList(ctx, path, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(list)
		}
		if len(list) == 0 {
			fmt.Fprintln(stdout, "the trash holds nothing at "+path)
			return nil
		}
		printTrash(stdout, list)
		return nil
	})
}

// printTrash is the table of `trash ls`. TRASHED is exact (nanoseconds):
// `trash restore --at` takes it as printed.
func printTrash(w io.Writer, list []workspace.TrashEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRASHED\tOP\tBY\tTYPE\tMODE\tSIZE\tPATH")
	for _, e := range list {
		path := e.Path
		if e.Target != "" {
			path += " -> " + e.Target
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%04o\t%s\t%s\n", e.TrashedAt.Format(time.RFC3339Nano), e.Op, e.Origin, e.Type, e.Mode, humanBytes(e.Size), path)
	}
	tw.Flush()
}

func runTrashRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("trash restore", "trash restore PATH [--at TIME] [--force] [--json]",
		"  workspace-server trash restore /src                      # the newest version of everything under /src\n"+
			"  workspace-server trash restore /a.txt --at 10m            # the version trashed at least 10 minutes ago\n"+
			"  workspace-server trash restore /a.txt --at 2026-12-02T15:04:05.123456789Z --force\n"+
			"\nA restore is a change of the server's store: the next push (or exec) takes it to the container.\n"+
			"A live file in the way (different content, or a file where a directory must be) fails the\n"+
			"restore with EEXIST and changes nothing; --force replaces it, and the replaced version goes\n"+
			"to the trash, so the restore can be undone the same way.\n", stdout, stderr)
	cf := c.clientFlags()
	at := c.fs.String("at", "", "restore the version trashed at or before TIME: RFC 3339 (as trash ls prints it) or a duration ago (10m)")
	force := c.fs.Bool("force", false, "replace live versions in the way (they go to the trash)")
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	var when time.Time
	check := func(pos []string) error {
		t, err := parseWhen(*at, time.Now())
		if err != nil {
			return err
		}
		when = t
		return onePath(pos)
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		rep, err := ws.TrashRestore(ctx, workspace.RestoreRequest{Path: pos[0], At: when, Force: *force})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(rep)
		}
		var more []string
		if rep.Matched > 0 {
			more = append(more, fmt.Sprintf("%d already there", rep.Matched))
		}
		if rep.Replaced > 0 {
			more = append(more, fmt.Sprintf("%d live versions replaced (now in the trash)", rep.Replaced))
		}
		if rep.Created > 0 {
			more = append(more, fmt.Sprintf("%d parent directories made", rep.Created))
		}
		s := fmt.Sprintf("restored %s: %d entries", pos[0], rep.Restored)
		if len(more) > 0 {
			s += " (" + strings.Join(more, ", ") + ")"
		}
		fmt.Fprintln(stdout, s+"; the next push takes it to the container")
		return nil
	})
}

// parseWhen reads --at: empty is the zero time (the newest version), an
// RFC 3339 time, or a duration that long before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--at %q: want an RFC 3339 time (2026-12-02T15:04:05Z) or a duration ago (10m)", s)
	}
	return now.Add(-d), nil
}

func runTrashPurge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("trash purge", "trash purge [PATH] [--older-than D] [--json]",
		"  workspace-server trash purge                     # empty the trash\n"+
			"  workspace-server trash purge /build --older-than 1h\n", stdout, stderr)
	cf := c.clientFlags()
	older := c.fs.Duration("older-than", 0, "purge only versions trashed more than this long ago (0: all)")
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	check := func(pos []string) error {
		if *older < 0 {
			return fmt.Errorf("--older-than %v: want a positive duration", *older)
		}
		return optPath(pos)
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		path := "/"
		if len(pos) == 1 {
			path = pos[0]
		}
		rep, err := ws.TrashPurge(ctx, path, *older)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(rep)
		}
		fmt.Fprintf(stdout, "purged %d entries (%s) at %s\n", rep.Entries, humanBytes(rep.Bytes), path)
		return nil
	})
}
