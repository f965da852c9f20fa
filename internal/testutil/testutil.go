// Package testutil holds helpers the packages' tests share.
package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing t when d passes first. Tests
// use it instead of sleeping: it waits on the condition, with a deadline.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
