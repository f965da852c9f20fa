package execrun

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Spec describes one command to run. Exactly one of Argv and Shell is set.
type Spec struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// exec's PATH (the base PATH, or one given in Env) unless it has a slash.
	Argv []string
	// Shell is a script run by /bin/sh -c.
	Shell string
	// Cwd is the working directory: relative to the mount root, or absolute
	// inside it. Empty means the root.
	Cwd string
	// Env entries (K=V) are added to the base environment, replacing base
	// entries with the same key; a later entry wins over an earlier one.
	Env []string
	// Stdin is copied to the process's standard input until EOF; nil gives
	// /dev/null. The copy stops when the process exits, but a Read that never
	// returns keeps its goroutine until it does: pass a reader that ends.
	Stdin io.Reader
	// Timeout bounds the run; zero means the runner's default, above the
	// runner's maximum is refused.
	Timeout time.Duration
	// User, when set, runs the command under these credentials (--user).
	User *Credential
	// LogCap is the most output bytes this exec's log keeps; zero means
	// the runner's Options.LogCap, which is also the most it may ask for.
	LogCap int64
}

// Credential is the uid, gid and supplementary groups an exec runs as. Nil
// Groups clears the supplementary groups (what dropping root wants).
type Credential struct {
	Uid    uint32
	Gid    uint32
	Groups []uint32
}

// defaultPath is the PATH of a process whose daemon has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passEnv are the daemon's own variables an exec inherits. Nothing else
// passes: the daemon's environment holds its token.
var passEnv = []string{"PATH", "LANG", "LC_ALL", "TZ"}

// command is a validated Spec, ready to start.
type command struct {
	path    string // resolved executable
	argv    []string
	dir     string // resolved working directory
	env     []string
	timeout time.Duration
	cred    *syscall.Credential
	logCap  int64
}

func (r *Runner) prepare(s Spec) (*command, error) {
	var argv []string
	switch {
	case len(s.Argv) > 0 && s.Shell != "":
		return nil, fmt.Errorf("both argv and shell given: %w", ErrBadSpec)
	case len(s.Argv) > 0:
		if s.Argv[0] == "" {
			return nil, fmt.Errorf("empty command name: %w", ErrBadSpec)
		}
		argv = s.Argv
	case s.Shell != "":
		argv = []string{"sh", "-c", s.Shell}
	default:
		return nil, fmt.Errorf("no command: %w", ErrBadSpec)
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("NUL byte in argument: %w", ErrBadSpec)
		}
	}
	timeout, err := bounded("timeout", s.Timeout, r.opts.DefaultTimeout, r.opts.MaxTimeout)
	if err != nil {
		return nil, err
	}
	logCap, err := bounded("log cap", s.LogCap, r.opts.LogCap, r.opts.LogCap)
	if err != nil {
		return nil, err
	}
	dir, err := r.resolveCwd(s.Cwd)
	if err != nil {
		return nil, err
	}
	c := &command{argv: argv, dir: dir, timeout: timeout, logCap: logCap}
	uid := os.Geteuid()
	if s.User != nil {
		uid = int(s.User.Uid)
		c.cred = &syscall.Credential{Uid: s.User.Uid, Gid: s.User.Gid, Groups: s.User.Groups}
	}
	if c.env, err = buildEnv(uid, dir, s.Env); err != nil {
		return nil, err
	}
	if s.Shell != "" {
		c.path = "/bin/sh"
	} else if c.path, err = lookPath(argv[0], dir, envValue(c.env, "PATH")); err != nil {
		return nil, err
	}
	return c, nil
}

// resolveCwd turns a Spec.Cwd into a real directory inside the root. The
// check keeps callers from confusing container and workspace paths; it is not
// a sandbox (the command itself may cd anywhere).
func (r *Runner) resolveCwd(cwd string) (string, error) {
	if cwd == "" {
		return r.root, nil
	}
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", fmt.Errorf("cwd %q: NUL byte: %w", cwd, ErrBadCwd)
	}
	p := filepath.Clean(cwd)
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.root, p)
	}
	if !within(r.root, p) {
		return "", fmt.Errorf("cwd %q: outside %s: %w", cwd, r.root, ErrBadCwd)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w: %w", cwd, ErrBadCwd, err)
	}
	if !within(r.root, real) {
		return "", fmt.Errorf("cwd %q: resolves to %s, outside %s: %w", cwd, real, r.root, ErrBadCwd)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w: %w", cwd, ErrBadCwd, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("cwd %q: %w: %w", cwd, ErrBadCwd, syscall.ENOTDIR)
	}
	return real, nil
}

// within reports whether the clean absolute path p is root or below it.
func within(root, p string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// buildEnv is the base environment for uid in dir, overridden by extra.
func buildEnv(uid int, dir string, extra []string) ([]string, error) {
	base := []string{"PATH=" + defaultPath}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			base = append(base, k+"="+v)
		}
	}
	home := "/"
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		home = u.HomeDir
		base = append(base, "USER="+u.Username, "LOGNAME="+u.Username)
	}
	base = append(base, "HOME="+home, "PWD="+dir)
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("env entry %q is not K=V: %w", kv, ErrBadSpec)
		}
	}
	return mergeEnv(append(base, extra...)), nil
}

// mergeEnv keeps the last entry of each key, in the order keys first appear.
func mergeEnv(env []string) []string {
	index := make(map[string]int, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// lookPath finds name the way a shell would, but in the exec's PATH rather
// than the daemon's. Relative PATH entries are skipped, as os/exec refuses
// them too.
func lookPath(name, dir, path string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if err := executable(name); err != nil {
			return "", fmt.Errorf("command %s: %w", name, err)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: %w: %w", name, exec.ErrNotFound, fs.ErrNotExist)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// bounded is a spec's limit v: def when it is 0, refused when negative or
// above max.
func bounded[T ~int64](what string, v, def, max T) (T, error) {
	switch {
	case v < 0:
		return 0, fmt.Errorf("negative %s %v: %w", what, v, ErrBadSpec)
	case v == 0:
		return def, nil
	case v > max:
		return 0, fmt.Errorf("%s %v above the maximum %v: %w", what, v, max, ErrBadSpec)
	}
	return v, nil
}
