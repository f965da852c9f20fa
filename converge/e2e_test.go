package converge_test

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
)

// TestRemoteVerifyAndRepairWithMount runs verify and repair through the
// real workspace Remote against a real computerd with its FUSE mount.
func TestRemoteVerifyAndRepairWithMount(t *testing.T) {
	d := computertest.Start(t, computer.Config{Token: "secret"})
	ctx := context.Background()
	server, err := vfs.Open(ctx, filepath.Join(t.TempDir(), "server.db"), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	rem := remote.New(server, remote.Options{Runtime: workspace.Runtime{Endpoint: d.SyncURL()}, Token: "secret", Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { rem.Close() })

	for _, p := range []string{"a.txt", "src/b.go", "src/c.go"} {
		if err := server.MkdirPath(ctx, "src", 0o755, true); err != nil {
			t.Fatal(err)
		}
		if _, err := server.WriteFile(ctx, p, []byte("content of "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rem.Push(ctx, workspace.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	// Drift no rev describes: a mode flipped in the container's database.
	db, err := sql.Open("sqlite", "file:"+d.Store().Path()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	ino, err := d.Store().ResolvePath(ctx, "src/b.go")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE nodes SET mode = 384 WHERE ino = ?`, ino); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// And a write through the mount that no pull has fetched yet.
	if err := os.WriteFile(filepath.Join(d.MountDir(), "src", "new.go"), []byte("package src\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	rep, err := rem.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/src/b.go", "/src/new.go"}; rep.Converged || !slices.Equal(rep.Differences, want) {
		t.Fatalf("verify: converged %v, differences %q, want %q", rep.Converged, rep.Differences, want)
	}
	if rep.ServerRoot == rep.ContainerRoot || len(rep.ServerRoot) != 64 || rep.CheckedAt.IsZero() {
		t.Errorf("report roots %q / %q at %v", rep.ServerRoot, rep.ContainerRoot, rep.CheckedAt)
	}
	rep, err = rem.Repair(ctx, workspace.SyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Converged || rep.ServerRoot != rep.ContainerRoot {
		t.Fatalf("after repair: converged %v, differences %q", rep.Converged, rep.Differences)
	}
	// The server's mode went back into the mount; the container's new file
	// reached the server.
	fi, err := os.Stat(filepath.Join(d.MountDir(), "src", "b.go"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mount sees src/b.go as %v, %v; want 0644", fi.Mode(), err)
	}
	if got, err := server.ReadFile(ctx, "src/new.go"); err != nil || string(got) != "package src\n" {
		t.Errorf("server src/new.go = %q, %v", got, err)
	}
	if rep, err := rem.Verify(ctx); err != nil || !rep.Converged {
		t.Errorf("verify after repair: %+v, %v", rep, err)
	}
}
