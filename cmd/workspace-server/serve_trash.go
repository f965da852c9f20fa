package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// safetyFlags are serve's trash and deletion-safety flags.
type safetyFlags struct {
	retention, maxBytes, maxEntries, share, min *string
}

const safetyHelp = `
Trash and deletion safety (each with its environment twin):
  --trash-retention 24h       WSYNC_TRASH_RETENTION    how long deleted and overwritten versions stay restorable (0: no trash)
  --trash-max-bytes 10GiB     WSYNC_TRASH_MAX_BYTES    the trash's bound per workspace, oldest evicted first (-1: none)
  --trash-max-entries 1000000 WSYNC_TRASH_MAX_ENTRIES
  --mass-delete-share 0.5     WSYNC_MASS_DELETE_SHARE  a pull deleting more than this share of a workspace...
  --mass-delete-min 1000      WSYNC_MASS_DELETE_MIN    ...and at least this many paths pauses until
                                                       "workspace-server pull --allow-mass-delete" (share 1: never)
  workspace-server serve --trash-retention 72h --trash-max-bytes 50GiB --mass-delete-share 0.3
`

func (c *command) safetyFlags() *safetyFlags {
	return &safetyFlags{
		retention:  c.fs.String("trash-retention", env("WSYNC_TRASH_RETENTION", vfs.DefaultTrashRetention.String()), "how long deleted and overwritten versions stay in the trash; 0 keeps no trash (env WSYNC_TRASH_RETENTION)"),
		maxBytes:   c.fs.String("trash-max-bytes", env("WSYNC_TRASH_MAX_BYTES", "10GiB"), "the trash's bound per workspace in file bytes, oldest evicted first; -1: none (env WSYNC_TRASH_MAX_BYTES)"),
		maxEntries: c.fs.String("trash-max-entries", env("WSYNC_TRASH_MAX_ENTRIES", strconv.Itoa(vfs.DefaultTrashMaxEntries)), "the trash's bound per workspace in versions; -1: none (env WSYNC_TRASH_MAX_ENTRIES)"),
		share:      c.fs.String("mass-delete-share", env("WSYNC_MASS_DELETE_SHARE", strconv.FormatFloat(workspace.DefaultMassDeleteShare, 'g', -1, 64)), "a pull that would delete more than this share of a workspace's paths pauses until confirmed; 1: never (env WSYNC_MASS_DELETE_SHARE)"),
		min:        c.fs.String("mass-delete-min", env("WSYNC_MASS_DELETE_MIN", strconv.Itoa(workspace.DefaultMassDeleteMin)), "... when it deletes at least this many (env WSYNC_MASS_DELETE_MIN)"),
	}
}

// apply puts the flags into o; a bad value is a usage error's message.
func (f *safetyFlags) apply(o *workspace.Options) error {
	ret, err := time.ParseDuration(*f.retention)
	if err != nil || ret < 0 {
		return fmt.Errorf("--trash-retention %q: want a duration (0: no trash)", *f.retention)
	}
	if ret == 0 {
		o.NoTrash = true
	}
	o.Trash.Retention = ret
	if o.Trash.MaxBytes, err = parseBytes(*f.maxBytes); err != nil {
		return fmt.Errorf("--trash-max-bytes: %w", err)
	}
	if o.Trash.MaxEntries, err = strconv.ParseInt(*f.maxEntries, 10, 64); err != nil || o.Trash.MaxEntries == 0 || o.Trash.MaxEntries < -1 {
		return fmt.Errorf("--trash-max-entries %q: want a positive count (-1: none)", *f.maxEntries)
	}
	share, err := strconv.ParseFloat(*f.share, 64)
	if err != nil || share <= 0 || share > 1 {
		return fmt.Errorf("--mass-delete-share %q: want a share above 0, at most 1", *f.share)
	}
	min, err := strconv.Atoi(*f.min)
	if err != nil || min <= 0 {
		return fmt.Errorf("--mass-delete-min %q: want a positive count", *f.min)
	}
	o.MassDelete = workspace.MassDeleteOptions{Share: share, Min: min}
	return nil
}

// parseBytes reads a byte count: digits with an optional K, M, G or T
// suffix (powers of 1024; "iB" or "B" after it allowed), or -1 for none.
func parseBytes(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	shift := 0
	if n := len(t); n > 0 {
		if i := strings.IndexByte("KMGT", t[n-1]); i >= 0 {
			shift, t = 10*(i+1), t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)>>shift {
		return 0, fmt.Errorf("%q: want a positive byte count such as 10GiB (-1: none)", s)
	}
	return v << shift, nil
}
