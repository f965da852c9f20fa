package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/benbjohnson/litestream"

	"github.com/wsync/wsync/objstore"
)

// ErrNoReplica: no generation at or below the one asked for holds a
// restorable database.
var ErrNoReplica = errors.New("replica: no restorable replica")

// Generations lists the generations under prefix that have a directory
// in the bucket, newest first.
func Generations(ctx context.Context, st *objstore.Store, prefix string) ([]int64, error) {
	names, err := st.Dirs(ctx, strings.Trim(prefix, "/"))
	if err != nil {
		return nil, fmt.Errorf("replica: generations of %s: %w", prefix, err)
	}
	var gens []int64
	for _, n := range names {
		if g, ok := parseGenerationDir(n); ok {
			gens = append(gens, g)
		}
	}
	slices.Sort(gens)
	slices.Reverse(gens)
	return gens, nil
}

// Restore writes the database of the newest generation <= upTo that
// holds one (a snapshot and the LTX files after it) to dbPath, and
// returns that generation. A generation with no restorable data (its
// owner died before its first ship) is skipped for the next older one;
// any other failure of the newest candidate fails the restore rather
// than fall back past data that may exist. It refuses an existing
// dbPath; the database is restored beside it, checked (quick_check) and
// linked into place, so dbPath either does not exist or is whole.
// ErrNoReplica when no generation qualifies.
func Restore(ctx context.Context, st *objstore.Store, prefix string, upTo int64, dbPath string) (int64, error) {
	if _, err := os.Lstat(dbPath); err == nil {
		return 0, fmt.Errorf("replica: restore to %s: %w", dbPath, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("replica: restore to %s: %w", dbPath, err)
	}
	gens, err := Generations(ctx, st, prefix)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o755); err != nil {
		return 0, fmt.Errorf("replica: restore to %s: %w", dbPath, err)
	}
	log := slog.Default().With("component", "replica", "prefix", prefix)
	for _, g := range gens {
		if g > upTo {
			continue
		}
		err := restoreGeneration(ctx, st, strings.Trim(prefix, "/")+"/"+GenerationDir(g), dbPath)
		if errors.Is(err, litestream.ErrTxNotAvailable) || errors.Is(err, litestream.ErrNoSnapshots) {
			log.Info("generation holds no restorable database; trying an older one", "generation", g, "err", err)
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("replica: restore generation %d of %s: %w", g, prefix, err)
		}
		return g, nil
	}
	return 0, fmt.Errorf("replica: restore %s (generations <= %d): %w", prefix, upTo, ErrNoReplica)
}

func restoreGeneration(ctx context.Context, st *objstore.Store, dir, dbPath string) error {
	client, err := newClient(ctx, st, dir)
	if err != nil {
		return err
	}
	if err := client.Init(ctx); err != nil {
		return caBundleHint(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dbPath), "."+filepath.Base(dbPath)+".restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Only the ReplicaClient interface: litestream's v0.3 layout is not ours.
	rep := litestream.NewReplicaWithClient(nil, &fencedClient{ReplicaClient: client})
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = filepath.Join(tmp, filepath.Base(dbPath))
	opt.IntegrityCheck = litestream.IntegrityCheckQuick
	if err := rep.Restore(ctx, opt); err != nil {
		return err
	}
	// A hard link cannot replace an existing file: a dbPath created since
	// the check above is not overwritten.
	if err := os.Link(opt.OutputPath, dbPath); err != nil {
		return fmt.Errorf("install restored database: %w", err)
	}
	if d, err := os.Open(filepath.Dir(dbPath)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Prune deletes the objects of every generation under prefix older than
// keep, which must hold a restorable database (Restore just read it):
// no claim restores an older one while it exists. fence runs before
// every delete (nil: none). It returns how many objects it deleted. A
// fenced old owner writing late into its own generation recreates
// objects no one reads; the next Prune takes them.
func Prune(ctx context.Context, st *objstore.Store, prefix string, keep int64, fence func() error) (int, error) {
	gens, err := Generations(ctx, st, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range gens {
		if g >= keep {
			continue
		}
		dir := strings.Trim(prefix, "/") + "/" + GenerationDir(g) + "/"
		for obj, err := range st.List(ctx, dir) {
			if err != nil {
				return n, fmt.Errorf("replica: prune %s: %w", dir, err)
			}
			if fence != nil {
				if err := fence(); err != nil {
					return n, fmt.Errorf("replica: prune %s: %w", dir, err)
				}
			}
			if err := st.Delete(ctx, obj.Key); err != nil {
				return n, fmt.Errorf("replica: prune %s: %w", dir, err)
			}
			n++
		}
	}
	return n, nil
}
