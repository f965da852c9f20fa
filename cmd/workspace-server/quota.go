package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// quotaFlags are --max-bytes, --max-entries and --max-file-size. Sizes
// are human (10GiB, 500MB, 1048576); "0", "none" or "unlimited" is no
// bound. withEnv gives them their environment twins (workspaces create;
// set-quota changes only the flags given, so it takes none).
type quotaFlags struct {
	bytes, entries, fileSize string
	fs                       *flag.FlagSet
}

func (c *command) quotaFlags(withEnv bool) *quotaFlags {
	q := &quotaFlags{fs: c.fs}
	def := func(key string) (string, string) {
		if !withEnv {
			return "", ""
		}
		return env(key, ""), " (env " + key + ")"
	}
	v, e := def("WSYNC_QUOTA_MAX_BYTES")
	c.fs.StringVar(&q.bytes, "max-bytes", v, "most bytes the workspace's files may hold (10GiB, 500MB; 0: no limit)"+e)
	v, e = def("WSYNC_QUOTA_MAX_ENTRIES")
	c.fs.StringVar(&q.entries, "max-entries", v, "most files, directories and symlinks (0: no limit)"+e)
	v, e = def("WSYNC_QUOTA_MAX_FILE_SIZE")
	c.fs.StringVar(&q.fileSize, "max-file-size", v, "largest size of one file (1GiB; 0: no limit)"+e)
	return q
}

// given reports which quota flags the command line named.
func (q *quotaFlags) given() map[string]bool {
	set := map[string]bool{}
	q.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-bytes", "max-entries", "max-file-size":
			set[f.Name] = true
		}
	})
	return set
}

// apply parses the flags into q: every flag with a value when all is set,
// else only those given on the command line.
func (q *quotaFlags) apply(base vfs.Quota, all bool) (vfs.Quota, error) {
	given := q.given()
	out := base
	for _, f := range []struct {
		name, v string
		dst     *int64
		parse   func(string) (int64, error)
	}{
		{"max-bytes", q.bytes, &out.MaxBytes, parseSize},
		{"max-entries", q.entries, &out.MaxEntries, parseCount},
		{"max-file-size", q.fileSize, &out.MaxFileSize, parseSize},
	} {
		if !given[f.name] && !(all && f.v != "") {
			continue
		}
		n, err := f.parse(f.v)
		if err != nil {
			return out, fmt.Errorf("--%s: %w", f.name, err)
		}
		*f.dst = n
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}

func unlimited(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "0", "none", "unlimited":
		return true
	}
	return false
}

// parseSize reads a human size (go-humanize: 10GiB, 1.5 GB, 4096).
func parseSize(s string) (int64, error) {
	if unlimited(s) {
		return 0, nil
	}
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return 0, fmt.Errorf("%q is negative (0 means no limit)", s)
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (10GiB, 500MB, 1048576): %w", s, err)
	}
	if n > vfs.MaxQuotaBytes {
		return 0, fmt.Errorf("%q is larger than %s", s, humanize.IBytes(vfs.MaxQuotaBytes))
	}
	return int64(n), nil
}

func parseCount(s string) (int64, error) {
	if unlimited(s) {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a count (0 means no limit)", s)
	}
	return n, nil
}

// describeQuota is a quota and its usage for people.
func describeQuota(st workspace.QuotaStatus) string {
	bound := func(used, max int64, size bool) string {
		f := func(v int64) string {
			if size {
				return humanize.IBytes(uint64(v))
			}
			return strconv.FormatInt(v, 10)
		}
		if max == 0 {
			return f(used) + " (no limit)"
		}
		return fmt.Sprintf("%s of %s (%d%%)", f(used), f(max), used*100/max)
	}
	s := "bytes " + bound(st.Used.Bytes, st.MaxBytes, true) + ", entries " + bound(st.Used.Entries, st.MaxEntries, false)
	if st.MaxFileSize > 0 {
		s += ", max file size " + humanize.IBytes(uint64(st.MaxFileSize))
	}
	return s
}

func runWorkspacesSetQuota(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("workspaces set-quota", "workspaces set-quota NAME [--max-bytes SIZE] [--max-entries N] [--max-file-size SIZE] [--json]",
		"  workspace-server workspaces set-quota proj --max-bytes 10GiB --max-entries 200000 --max-file-size 1GiB\n"+
			"  workspace-server workspaces set-quota proj --max-file-size unlimited\n\n"+
			"Only the flags given change. A quota below the usage keeps every file and refuses what would\n"+
			"add more (EDQUOT in the mount, 413 EDQUOT from the files API); a pull it stopped resumes once\n"+
			"it is raised.\n", stdout, stderr)
	cf := c.clientFlags()
	qf := c.quotaFlags(false)
	asJSON := c.fs.Bool("json", false, "print the quota and usage as JSON")
	pos, code, ok := c.checkArgs(args, oneWorkspaceName)
	if !ok {
		return code
	}
	if len(qf.given()) == 0 {
		return c.usageError("want at least one of --max-bytes, --max-entries, --max-file-size")
	}
	if _, err := qf.apply(vfs.Quota{}, false); err != nil {
		return c.usageError("%v", err)
	}
	cl, err := cf.client()
	if err != nil {
		return c.fail(err)
	}
	ws := cl.Workspace(pos[0])
	cur, err := ws.Quota(ctx)
	if err != nil {
		return c.fail(err)
	}
	q, err := qf.apply(cur.Quota, false)
	if err != nil {
		return c.usageError("%v", err)
	}
	st, err := ws.SetQuota(ctx, q)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(st)
	}
	fmt.Fprintf(stdout, "%s: %s\n", pos[0], describeQuota(st))
	return exitOK
}
