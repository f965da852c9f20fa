package tests

import (
	"os"
	"testing"
)

// computerd killed during a snapshot install (seeds 7 and 17 of
// TestCrashMatrix: converge.install.batch) restarts with a store that is
// no longer empty, so the server re-baselines with a normal push and never
// begins another snapshot. The staging database beside the store holds
// every chunk of the snapshot: it must not stay there for good (the
// restarted computerd finishes the install from it and removes it, see
// converge's doc).
func TestCrashedInstallLeavesNoStaging(t *testing.T) {
	runCrashSeeds(t, []uint64{7, 17}, func(t *testing.T, seed uint64, _ crashFigure, p *pair) {
		staging := p.cdState + ".snapshot"
		if fi, err := os.Stat(staging); err == nil {
			t.Errorf("seed %d: after the install was cut short and the trees converged, %s still holds %d bytes", seed, staging, fi.Size())
		}
	})
}
