package workspace

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
)

// DefaultName is the workspace bound to the server's own computerd.
const DefaultName = "default"

// validName reports whether name is [a-z0-9][a-z0-9_-]{0,62}. A loop, not
// a regexp: the bounded repetition compiles to a program of 129
// instructions, which every start of the CLI built at package init
// (issue 12). validate_test.go checks it against the regexp.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidateName checks a workspace name: [a-z0-9][a-z0-9_-]{0,62}. Names
// become directory names under the data dir, so nothing else is allowed.
func ValidateName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q (want [a-z0-9][a-z0-9_-]{0,62})", ErrBadName, name)
	}
	return nil
}

// Config is one workspace's registration, as the registry keeps it.
type Config struct {
	Name string `json:"name"`
	// Endpoint is computerd's sync URL (ws://HOST:45678/sync); empty means
	// no remote: the files API works, sync and exec give ErrNoRemote.
	Endpoint string `json:"endpoint,omitempty"`
	// HasToken: the workspace has a computerd token of its own, given by
	// value at creation and kept in <dir>/computerd.token (mode 0600). The
	// registry never holds the token, nor a path anyone could name.
	HasToken bool `json:"computerd_token,omitempty"`
	// Ignore is the configured gitignore patterns: nil means the default
	// ["node_modules"], an empty list ignores nothing; the IgnoreFile's
	// lines add to it.
	Ignore  []string  `json:"ignore"`
	Created time.Time `json:"created"`
	// ConflictPolicy says how the server settles a path both sides
	// changed (vfs.ConflictPolicy); empty is keep-both.
	ConflictPolicy vfs.ConflictPolicy `json:"conflict_policy,omitempty"`
	// Quota bounds the workspace's store (quota.go); zero fields are
	// unbounded.
	Quota vfs.Quota `json:"quota,omitzero"`
	// Runtimes are the runtimes attached to the workspace besides its
	// default one (whose endpoint and token are the fields above), by name.
	// Their tokens are kept in the workspace's directory, never here.
	Runtimes []Runtime `json:"runtimes,omitempty"`
	// PendingPulls are the pulls that failed and are owed before the next
	// push, by runtime name (see the package doc, "Pending pulls"). Kept
	// here so they survive a restart.
	PendingPulls map[string]*PendingPull `json:"pending_pulls,omitempty"`
	// Execs is the table of detached execs (see StartExec): the running
	// ones, and the newest settled ones (Options.ExecHistory). Kept here
	// so a restarted server re-attaches to them by id.
	Execs []ExecInfo `json:"execs,omitempty"`

	// LegacyPending is the pending pull of a version 2 registry, the
	// default runtime's. Load moves it to PendingPulls; never written.
	LegacyPending *PendingPull `json:"pending,omitempty"`

	// LegacyTokenFile is the token_file of a version 1 registry. Load keeps
	// it only when it is the workspace's own token file (then HasToken);
	// any other path is dropped. Never written.
	LegacyTokenFile string `json:"token_file,omitempty"`

	// tokenFile (the default workspace's, from serve
	// --computerd-token-file: operator-given) and token (the embedded
	// computerd's) are never persisted.
	tokenFile string
	token     string
}

// Info is what the API shows of a workspace: no token and no path.
type Info struct {
	Name     string   `json:"name"`
	Endpoint string   `json:"endpoint,omitempty"`
	Ignore   []string `json:"ignore"`
	// HasToken: a computerd token is configured (its value is never shown).
	HasToken bool      `json:"computerd_token"`
	Created  time.Time `json:"created"`
	// ConflictPolicy is the workspace's policy, keep-both unless set.
	ConflictPolicy vfs.ConflictPolicy `json:"conflict_policy"`
	// Quota is the workspace's quota (zero fields: unbounded).
	Quota vfs.Quota `json:"quota"`
	// Runtimes are the attached runtimes (the default one is the fields
	// above).
	Runtimes []Runtime `json:"runtimes,omitempty"`
}

// Info is the registration as the API shows it.
func (c Config) Info() Info {
	return Info{Name: c.Name, Endpoint: c.Endpoint, Ignore: slices.Clone(c.Ignore),
		HasToken: c.HasToken || c.tokenFile != "" || c.token != "", Created: c.Created,
		ConflictPolicy: cmp.Or(c.ConflictPolicy, vfs.KeepBoth), Quota: c.Quota, Runtimes: slices.Clone(c.Runtimes)}
}

// tokenPath is where a workspace's own computerd token is kept.
func tokenPath(dataDir, name string) string {
	return filepath.Join(dataDir, name, "computerd.token")
}

// registryFile is the on-disk form of the registry.
type registryFile struct {
	Version    int      `json:"version"`
	Workspaces []Config `json:"workspaces"`
}

// registryVersion 2: tokens by value only (computerd_token), pending pulls.
// 3: attached runtimes, pending pulls by runtime.
const registryVersion = 3

func registryPath(dataDir string) string { return filepath.Join(dataDir, "workspaces.json") }

// loadRegistry reads the registry; a missing file is an empty registry.
// dropped names the workspaces whose version 1 token_file pointed outside
// their own directory: that path is not read, and the workspace has no
// token until it is re-created.
func loadRegistry(dataDir string) (cfgs []Config, dropped []string, err error) {
	b, err := os.ReadFile(registryPath(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load registry: %w", err)
	}
	var rf registryFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, nil, fmt.Errorf("load registry %s: %w", registryPath(dataDir), err)
	}
	if rf.Version > registryVersion {
		return nil, nil, fmt.Errorf("load registry %s: version %d is newer than this build (%d)", registryPath(dataDir), rf.Version, registryVersion)
	}
	for i, c := range rf.Workspaces {
		if err := ValidateName(c.Name); err != nil {
			return nil, nil, fmt.Errorf("load registry: %w", err)
		}
		if c.LegacyTokenFile != "" {
			// Version 1 recorded a path, which a caller could name. Only the
			// file the server wrote itself is trusted.
			if filepath.Clean(c.LegacyTokenFile) == filepath.Clean(tokenPath(dataDir, c.Name)) {
				rf.Workspaces[i].HasToken = true
			} else {
				dropped = append(dropped, c.Name)
			}
			rf.Workspaces[i].LegacyTokenFile = ""
		}
		if p := c.LegacyPending; p != nil {
			if rf.Workspaces[i].PendingPulls == nil {
				rf.Workspaces[i].PendingPulls = make(map[string]*PendingPull)
			}
			if rf.Workspaces[i].PendingPulls[DefaultRuntime] == nil {
				rf.Workspaces[i].PendingPulls[DefaultRuntime] = p
			}
			rf.Workspaces[i].LegacyPending = nil
		}
		if _, err := vfs.ParseConflictPolicy(string(c.ConflictPolicy)); err != nil {
			return nil, nil, fmt.Errorf("load registry: workspace %q: %w", c.Name, err)
		}
		if err := c.Quota.Validate(); err != nil {
			return nil, nil, fmt.Errorf("load registry: workspace %q: %w", c.Name, err)
		}
		for _, rt := range c.Runtimes {
			if err := ValidateRuntimeName(rt.Name); err != nil {
				return nil, nil, fmt.Errorf("load registry: workspace %q: %w", c.Name, err)
			}
		}
	}
	return rf.Workspaces, dropped, nil
}

// saveRegistry writes the registry atomically.
func saveRegistry(dataDir string, cfgs []Config) error {
	cfgs = slices.Clone(cfgs)
	slices.SortFunc(cfgs, func(a, b Config) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(registryFile{Version: registryVersion, Workspaces: cfgs}, "", "  ")
	if err != nil {
		return fmt.Errorf("save registry: %w", err)
	}
	if err := writeFileAtomic(registryPath(dataDir), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save registry: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory: write, fsync, rename, fsync the directory. Readers see the old
// file or the new one, and a crash leaves one of them.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this fails harmlessly
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
