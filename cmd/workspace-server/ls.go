package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runLs(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("ls", "ls [--json] [-R] [-l] [PATH]",
		"  workspace-server ls /src\n  workspace-server ls --json -R / | jq -r '.[] | select(.type==\"file\") | .path'\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, `print a JSON array of {"path","type","mode","size","mtime","target","sha256"}`)
	recursive := c.fs.Bool("R", false, "list the whole subtree")
	long := c.fs.Bool("l", false, "long format: mode, size, mtime, path")
	p := "/"
	check := func(pos []string) error {
		if len(pos) > 1 {
			return errors.New("want at most one PATH")
		}
		if len(pos) == 1 {
			p = pos[0]
		}
		return checkPath(p)
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		// sha256 costs a read of every file: only the JSON form carries it.
		ls, err := ws.List(ctx, p, *recursive, *asJSON)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(ls)
		}
		sp, _ := vfs.CleanAPIPath(p)
		for _, fi := range ls {
			name := path.Base(fi.Path)
			if *recursive || fi.Path == "/"+sp { // the subtree, or PATH itself (a file)
				name = fi.Path
			}
			if *long {
				fmt.Fprintf(stdout, "%s %10d %s %s\n", modeString(fi), fi.Size, fi.Mtime.Local().Format(time.DateTime), decorate(name, fi))
			} else {
				fmt.Fprintln(stdout, decorate(name, fi))
			}
		}
		return nil
	})
}

// decorate marks directories with "/" and shows symlink targets.
func decorate(name string, fi workspace.FileInfo) string {
	switch fi.Type {
	case "dir":
		return name + "/"
	case "symlink":
		return name + " -> " + fi.Target
	}
	return name
}

// modeString renders type and permission bits as ls -l does.
func modeString(fi workspace.FileInfo) string {
	m := fs.FileMode(fi.Mode & 0o777)
	if fi.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if fi.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if fi.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch fi.Type {
	case "dir":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	}
	return m.String()
}

// printJSON prints v as the verbs' indented JSON; a failure is exit 1.
func (c *command) printJSON(v any) int {
	if err := c.writeJSON(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

func (c *command) writeJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
