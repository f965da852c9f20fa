package tests

import (
	"testing"
)

// A crash between a batch's apply and the bounce-suppression watermark
// write used to lose the suppression for that batch and, because the next
// batch's RevBefore was then never covered, for every later batch of the
// same sync: the next sync the other way re-sent all of them (each skipped
// by apply, so nothing was wrong but the cost). Each apply now keeps its
// stamped revs as the peer's bounce run in its own transaction
// (vfs.BounceRun). Seeds of TestCrashMatrix: 1 = push, computerd killed at
// syncwire.push.applied:1 (307 re-sent before); 4 = pull, server killed at
// syncwire.pull.applied:2 (378 re-sent before).
func TestCrashKeepsBounceSuppression(t *testing.T) {
	runCrashSeeds(t, []uint64{1, 4}, func(t *testing.T, seed uint64, f crashFigure, _ *pair) {
		if f.bounced > 256 {
			t.Errorf("seed %d (%s, %s killed at %s:%d): the sync back re-sent %d entries the other side had just applied, want at most one batch",
				seed, f.sc.op, f.sc.daemon, f.sc.point, f.hit, f.bounced)
		}
	})
}
