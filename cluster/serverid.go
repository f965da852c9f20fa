package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// ServerID returns the id of the server whose data directory is data,
// making one on first use (DATA/server-id). Two servers must never share
// a data directory, so the id names one server's leases.
func ServerID(data string) (string, error) {
	p := filepath.Join(data, "server-id")
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if _, perr := uuid.Parse(id); perr != nil {
			return "", fmt.Errorf("server id %s: %q is not a uuid", p, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("server id: %w", err)
	}
	id := uuid.NewString()
	if err := os.MkdirAll(data, 0o755); err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	return id, nil
}
