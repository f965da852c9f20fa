package converge

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/vfs"
)

// TestPerformanceFigures prints the figures of docs/PERFORMANCE.md
// ("## converge"). Run with
//
//	WSYNC_MEASURE=1 go test -run TestPerformanceFigures -v ./converge
func TestPerformanceFigures(t *testing.T) {
	if os.Getenv("WSYNC_MEASURE") == "" {
		t.Skip("set WSYNC_MEASURE=1")
	}
	ctx := context.Background()

	// One scan + hash of 100,000 files.
	s := templateStore(t, 100_000, "scan")
	for range 2 { // the second run is warm (page cache)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		start := time.Now()
		tr, err := BuildTree(ctx, s, vfs.NewIgnore(nil))
		must(t, err)
		took := time.Since(start)
		lean, err := buildTree(ctx, s, vfs.NewIgnore(nil), false)
		must(t, err)
		runtime.GC()
		var ml runtime.MemStats
		runtime.ReadMemStats(&ml)
		t.Logf("full + lean trees: %.1f MiB", float64(ml.HeapAlloc-m0.HeapAlloc)/(1<<20))
		runtime.KeepAlive(lean)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		t.Logf("scan+hash %d names: %v, tree holds %.1f MiB", tr.Len(), took, float64(m1.HeapAlloc-m0.HeapAlloc)/(1<<20))
		runtime.KeepAlive(tr)
	}
	measureKeepCurrent(t, s)

	// Verify with 0, 1 and 1,000 differing paths (1,000 spread over every
	// leaf directory, and 1,000 in one top-level directory).
	spread := func(i int) string { return fmt.Sprintf("d%03d/s%d/f%03d", i/10, i%10, (i*37)%100) }
	clustered := func(i int) string { return fmt.Sprintf("d042/s%d/f%03d", i/100, i%100) }
	for _, c := range []struct {
		name string
		n    int
		path func(int) string
	}{{"0", 0, nil}, {"1", 1, func(int) string { return "d042/s7/f017" }}, {"1000 spread", 1000, spread}, {"1000 clustered", 1000, clustered}} {
		server, cont := templateStore(t, 100_000, "server"), templateStore(t, 100_000, "container")
		markSynced(t, server, cont)
		if c.n > 0 {
			db := rawDB(t, cont.Path())
			for i := range c.n {
				_, err := db.Exec(`UPDATE nodes SET mode = 384 WHERE ino = ?`, inoOf(t, cont, c.path(i)))
				must(t, err)
			}
			must(t, db.Close())
		}
		r := newRig(t, server, cont)
		sess := r.session(t)
		cold, _, err := verify(ctx, server, sess, nil, 0, false)
		must(t, err)
		warm, _, err := verify(ctx, server, sess, nil, 0, false)
		must(t, err)
		t.Logf("verify %s differing: cold %v (local scan %v), warm %v; %d requests, %d node pages, %d wire bytes, %d differences",
			c.name, cold.Duration, cold.Scan, warm.Duration, warm.Requests, warm.Nodes, warm.WireBytes, len(warm.Differences))
		if c.n > 0 {
			rr, err := r.repair(ctx, t, server, RepairOptions{})
			must(t, err)
			t.Logf("repair %s differing: %v, pushed %d, %d wire bytes, converged after: %v", c.name, rr.Duration, rr.Pushed, rr.WireBytes, rr.After.Converged)
		}
	}

	// Snapshot bootstrap versus entry-wise push from rev 0, 50,000 files.
	server := templateStore(t, 50_000, "server50")
	contA, contB := newStore(t, "snap"), newStore(t, "push")
	ra := newRig(t, server, contA)
	start := time.Now()
	br, err := Bootstrap(ctx, server, ra.session(t), BootstrapOptions{Peer: "snap"})
	must(t, err)
	snapTime := time.Since(start)
	rb := newRig(t, server, contB)
	drv := syncwire.NewDriver(server, "push", rb.client, syncwire.DriverOptions{})
	start = time.Now()
	pr, err := drv.PushOnce(ctx)
	must(t, err)
	pushTime := time.Since(start)
	if root(t, contA, []string{}) != root(t, contB, []string{}) {
		t.Fatal("bootstrap and push disagree")
	}
	t.Logf("bootstrap %d records: %v, %d wire bytes (%d raw page bytes -> %d compressed, %d pages)",
		br.Total, snapTime, br.WireBytes, br.RawBytes, br.PageBytes, br.Pages)
	t.Logf("push from rev 0 %d entries: %v, %d wire bytes, %d batches", pr.Entries, pushTime, pr.WireBytes, pr.Batches)
	t.Logf("ratios snapshot/push: time %.2f, bytes %.3f", snapTime.Seconds()/pushTime.Seconds(), float64(br.WireBytes)/float64(pr.WireBytes))
}

// measureKeepCurrent estimates the alternative: hashes kept current on
// every write. A file write at depth 3 must refold its directory and every
// ancestor: per level, read the directory's children (name, kind, mode,
// content), read the child directories' stored hashes, hash, store the new
// hash. It runs that on the raw database next to a plain vfs write.
func measureKeepCurrent(t *testing.T, s *vfs.Store) {
	ctx := context.Background()
	db := rawDB(t, s.Path())
	defer db.Close()
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS merkle(ino INTEGER PRIMARY KEY, hash BLOB)`)
	must(t, err)
	chain := []vfs.Ino{inoOf(t, s, "d042/s7"), inoOf(t, s, "d042"), vfs.RootIno}
	const writes = 200
	start := time.Now()
	for i := range writes {
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		for _, dir := range chain {
			rows, err := tx.Query(`SELECT d.name, n.kind, n.mode, n.manifest, n.target, m.hash FROM dirents d
				JOIN nodes n ON n.ino = d.child LEFT JOIN merkle m ON m.ino = d.child WHERE d.parent = ? ORDER BY d.name`, dir)
			must(t, err)
			h := sha256.New()
			for rows.Next() {
				var name string
				var kind, mode int
				var manifest, mh []byte
				var target *string
				must(t, rows.Scan(&name, &kind, &mode, &manifest, &target, &mh))
				c := sha256.Sum256(manifest)
				h.Write([]byte(name))
				h.Write(c[:])
				h.Write(mh)
			}
			rows.Close()
			_, err = tx.Exec(`INSERT OR REPLACE INTO merkle(ino, hash) VALUES(?, ?)`, dir, h.Sum(nil))
			must(t, err)
		}
		must(t, tx.Commit())
		_ = i
	}
	rehash := time.Since(start) / writes
	start = time.Now()
	for i := range writes {
		_, err := s.WriteFile(ctx, fmt.Sprintf("d042/s7/w%03d", i), []byte("a small write"), 0o644)
		must(t, err)
	}
	write := time.Since(start) / writes
	t.Logf("keep-current estimate: refold 3 levels (fan-out 100/10/100) %v per write (own transaction), a vfs WriteFile %v", rehash, write)
}
