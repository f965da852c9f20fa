package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadRegistry: whatever workspaces.json holds, loading never panics
// and never yields a name that could escape the data dir.
func FuzzLoadRegistry(f *testing.F) {
	f.Add([]byte(`{"version":1,"workspaces":[{"name":"default","endpoint":"ws://h:1/sync","ignore":null}]}`))
	f.Add([]byte(`{"version":1,"workspaces":[{"name":"../etc"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"workspaces":[{"name":"a","ignore":[]}]}`))
	f.Add([]byte(`nonsense`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "workspaces.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		cfgs, _, err := loadRegistry(dir)
		if err != nil {
			return
		}
		for _, c := range cfgs {
			if err := ValidateName(c.Name); err != nil {
				t.Fatalf("loaded a bad name %q", c.Name)
			}
		}
		// What loads saves and loads back the same.
		if err := saveRegistry(dir, cfgs); err != nil {
			t.Fatal(err)
		}
		again, _, err := loadRegistry(dir)
		if err != nil || len(again) != len(cfgs) {
			t.Fatalf("round trip: %d -> %d, %v", len(cfgs), len(again), err)
		}
	})
}
