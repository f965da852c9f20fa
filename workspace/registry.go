package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultName is the workspace bound to the server's own computerd.
const DefaultName = "default"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidateName checks a workspace name: [a-z0-9][a-z0-9_-]{0,62}. Names
// become directory names under the data dir, so nothing else is allowed.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q (want [a-z0-9][a-z0-9_-]{0,62})", ErrBadName, name)
	}
	return nil
}

// Config is one workspace's registration.
type Config struct {
	Name string `json:"name"`
	// Endpoint is computerd's sync URL (ws://HOST:45678/sync); empty means
	// no remote: the files API works, sync and exec give ErrNoRemote.
	Endpoint string `json:"endpoint,omitempty"`
	// TokenFile holds the bearer token for Endpoint. The registry stores the
	// path, never the secret: a token given at creation is written to a
	// 0600 file in the workspace's directory.
	TokenFile string `json:"token_file,omitempty"`
	// Ignore is the pull ignore list: nil means the default
	// ["node_modules"], an empty list ignores nothing.
	Ignore  []string  `json:"ignore"`
	Created time.Time `json:"created"`

	// token is an in-memory secret (the embedded computerd's), used when
	// TokenFile is empty. Never persisted.
	token string
}

// registryFile is the on-disk form of the registry.
type registryFile struct {
	Version    int      `json:"version"`
	Workspaces []Config `json:"workspaces"`
}

const registryVersion = 1

func registryPath(dataDir string) string { return filepath.Join(dataDir, "workspaces.json") }

// loadRegistry reads the registry; a missing file is an empty registry.
func loadRegistry(dataDir string) ([]Config, error) {
	b, err := os.ReadFile(registryPath(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	var rf registryFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("load registry %s: %w", registryPath(dataDir), err)
	}
	if rf.Version > registryVersion {
		return nil, fmt.Errorf("load registry %s: version %d is newer than this build (%d)", registryPath(dataDir), rf.Version, registryVersion)
	}
	for _, c := range rf.Workspaces {
		if err := ValidateName(c.Name); err != nil {
			return nil, fmt.Errorf("load registry: %w", err)
		}
	}
	return rf.Workspaces, nil
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
