package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/wsync/wsync/vfs"
)

// IgnoreFile is the file at the workspace root whose lines add to the
// workspace's configured patterns. It syncs like any file.
const IgnoreFile = ".wsyncignore"

// MaxIgnoreFile bounds the IgnoreFile that is read: a larger one adds no
// pattern (Status says why).
const MaxIgnoreFile = 64 << 10

// ignoreState caches the patterns in force for one rev of the store.
type ignoreState struct {
	mu      sync.Mutex
	rev     int64
	cfg     []string // the configured list the cache was built from
	valid   bool
	list    []string
	ig      vfs.Ignore
	fileErr string
}

// Patterns returns the ignore patterns in force now: the configured list
// (DefaultIgnore when none is configured) followed by the lines of the
// server store's IgnoreFile, when it is a regular file.
//
// This is the one home of the rule. The server reads its own store's
// IgnoreFile at the start of each operation (pull, push, verify, repair,
// every files API call) and sends the list on the wire with each pull and
// each Merkle request; computerd never reads its copy of the file, it
// applies the list it is sent. So the two sides cannot disagree: a change
// of the file in the container takes effect on both sides from the first
// operation after the pull that brought it to the server; one made through
// the files API, from the next operation. A pattern change loses nothing:
// a newly ignored path stops syncing (both copies stay where they are), and
// the pull after a change re-reads the container's feed from the start
// (syncwire's re-baseline), so a newly un-ignored path arrives with it.
//
// Lines that vfs.ValidateIgnorePattern refuses, lines past vfs.MaxIgnore
// in all, and a file over MaxIgnoreFile add nothing; IgnoreFileError says
// which (the files API refuses to write such a file in the first place).
func (w *Workspace) Patterns(ctx context.Context) ([]string, error) {
	list, _, err := w.patterns(ctx)
	return list, err
}

// Matcher is the compiled Patterns: the files API's.
func (w *Workspace) Matcher(ctx context.Context) (vfs.Ignore, error) {
	_, ig, err := w.patterns(ctx)
	return ig, err
}

// IgnoreFileError says why (part of) the IgnoreFile was not used, "" when
// all of it was.
func (w *Workspace) IgnoreFileError() string {
	w.ign.mu.Lock()
	defer w.ign.mu.Unlock()
	return w.ign.fileErr
}

func (w *Workspace) patterns(ctx context.Context) ([]string, vfs.Ignore, error) {
	s, err := w.Store(ctx)
	if err != nil {
		return nil, vfs.Ignore{}, err
	}
	w.stateMu.Lock()
	cfg := w.cfg.Ignore
	w.stateMu.Unlock()
	st := &w.ign
	st.mu.Lock()
	defer st.mu.Unlock()
	rev := s.CurrentRev()
	if st.valid && st.rev == rev && slices.Equal(st.cfg, cfg) && (st.cfg == nil) == (cfg == nil) {
		return st.list, st.ig, nil
	}
	list := slices.Clone(cfg)
	if list == nil {
		list = slices.Clone(vfs.DefaultIgnore)
	}
	lines, fileErr, err := readIgnoreFile(ctx, s)
	if err != nil {
		return nil, vfs.Ignore{}, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
	}
	for i, l := range lines {
		if len(list) >= vfs.MaxIgnore {
			fileErr = fmt.Sprintf("%s: lines from %d on left out: more than %d patterns in all", IgnoreFile, i+1, vfs.MaxIgnore)
			break
		}
		list = append(list, l)
	}
	if fileErr != "" && fileErr != st.fileErr {
		w.log.Warn("ignore file not fully used", "err", fileErr)
	}
	st.rev, st.cfg, st.valid, st.list, st.ig, st.fileErr = rev, cfg, true, list, vfs.NewIgnore(list), fileErr
	return st.list, st.ig, nil
}

// readIgnoreFile returns the valid lines of the store's IgnoreFile (none
// when it is absent or not a regular file), and what was left out.
func readIgnoreFile(ctx context.Context, s *vfs.Store) ([]string, string, error) {
	a, err := s.Stat(ctx, IgnoreFile)
	if errors.Is(err, vfs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", IgnoreFile, err)
	}
	if a.Kind != vfs.KindFile {
		return nil, fmt.Sprintf("%s is a %s, not a file", IgnoreFile, a.Kind), nil
	}
	if a.Size > MaxIgnoreFile {
		return nil, fmt.Sprintf("%s has %d bytes (at most %d): none of it used", IgnoreFile, a.Size, MaxIgnoreFile), nil
	}
	r, size, err := s.OpenReader(ctx, IgnoreFile)
	if errors.Is(err, vfs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", IgnoreFile, err)
	}
	buf := make([]byte, min(size, MaxIgnoreFile))
	if _, err := r.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, "", fmt.Errorf("read %s: %w", IgnoreFile, err)
	}
	lines, bad := ParseIgnoreFile(buf)
	msg := ""
	if len(bad) > 0 {
		msg = fmt.Sprintf("%s: %d lines left out: %s", IgnoreFile, len(bad), strings.Join(bad[:min(len(bad), 3)], "; "))
	}
	return lines, msg, nil
}

// ParseIgnoreFile splits an IgnoreFile into its pattern lines (comments and
// blank lines dropped, a trailing CR cut) and says which lines it left out
// ("line N: why").
func ParseIgnoreFile(b []byte) (lines, bad []string) {
	for i, l := range bytes.Split(b, []byte("\n")) {
		line := strings.TrimSuffix(string(l), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := vfs.ValidateIgnorePattern(line); err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v", i+1, err))
			continue
		}
		lines = append(lines, line)
	}
	return lines, bad
}

// checkIgnoreFile refuses, at the files API, an IgnoreFile that would not
// be used whole.
func checkIgnoreFile(b []byte) error {
	if len(b) > MaxIgnoreFile {
		return fmt.Errorf("%w: %s of %d bytes (at most %d)", vfs.ErrInvalid, IgnoreFile, len(b), MaxIgnoreFile)
	}
	lines, bad := ParseIgnoreFile(b)
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s: %s", vfs.ErrInvalid, IgnoreFile, bad[0])
	}
	if len(lines) > vfs.MaxIgnore {
		return fmt.Errorf("%w: %s has %d patterns (at most %d)", vfs.ErrInvalid, IgnoreFile, len(lines), vfs.MaxIgnore)
	}
	return nil
}

// CheckIgnore validates a configured ignore list as Create and SetIgnore
// take it.
func CheckIgnore(list []string) error {
	return vfs.ValidateIgnore(list)
}

// SetIgnore replaces the workspace's configured ignore list (nil: the
// default, empty: nothing) and persists the registry, in a turn of the
// workspace's FIFO so no sync runs halfway under the old list. The next
// pull from each runtime re-reads its container's feed (see Patterns).
// It returns the patterns now in force.
func (w *Workspace) SetIgnore(ctx context.Context, list []string) ([]string, error) {
	if err := CheckIgnore(list); err != nil {
		return nil, fmt.Errorf("workspace %q: ignore: %w", w.cfg.Name, err)
	}
	list = slices.Clone(list)
	err := w.q.Do(ctx, func() error {
		w.m.mu.Lock()
		defer w.m.mu.Unlock()
		w.stateMu.Lock()
		old := w.cfg.Ignore
		w.cfg.Ignore = list
		w.stateMu.Unlock()
		err := ErrClosed
		if !w.m.closed {
			err = w.m.saveLocked()
		}
		if err != nil {
			w.stateMu.Lock()
			w.cfg.Ignore = old
			w.stateMu.Unlock()
			return fmt.Errorf("workspace %q: ignore: %w", w.cfg.Name, err)
		}
		w.log.Info("ignore list changed", "from", old, "to", list)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w.Patterns(ctx)
}
