package fifo

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestFIFORunsInArrivalOrder(t *testing.T) {
	var q Queue
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- q.Do(ctx, func() error {
			close(started)
			<-release
			return errors.New("first fails")
		})
	}()
	<-started

	// Queue three more behind the first, waiting until each is enqueued so
	// arrival order is known.
	var order []int
	results := make(chan error, 3)
	for i := 1; i <= 3; i++ {
		go func() {
			results <- q.Do(ctx, func() error { order = append(order, i); return nil })
		}()
		waitForQueue(t, &q, i)
	}
	close(release)
	if err := <-done; err == nil {
		t.Fatal("first call: want its error")
	}
	for range 3 {
		if err := <-results; err != nil {
			t.Fatalf("queued call failed after an earlier failure: %v", err)
		}
	}
	got, want := order, []int{1, 2, 3}
	if len(got) != len(want) || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// waitForQueue yields until q has n waiters; the goroutines enqueue
// themselves without blocking on anything but the queue.
func waitForQueue(t *testing.T, q *Queue, n int) {
	t.Helper()
	for q.Queued() < n {
		runtime.Gosched()
	}
}

func TestFIFOCancelledWaiterLeaves(t *testing.T) {
	var q Queue
	hold := make(chan struct{})
	started := make(chan struct{})
	go q.Do(context.Background(), func() error { close(started); <-hold; return nil })
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.Do(ctx, func() error { t.Error("cancelled waiter ran"); return nil }) }()
	waitForQueue(t, &q, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(hold)
	// The queue is usable afterwards.
	ran := false
	if err := q.Do(context.Background(), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after cancel: err %v ran %v", err, ran)
	}
}

// A thousand callers, a quarter of them giving up while they wait: the
// ones that run never overlap, and every caller either ran or got its
// context's error.
func TestQueueManyCallersExclusive(t *testing.T) {
	var q Queue
	var running, ran, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for i := range 1000 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%4 == 0 {
			cancel()
		}
		wg.Go(func() {
			defer cancel()
			err := q.Do(ctx, func() error {
				if running.Add(1) != 1 {
					t.Error("two callers ran at once")
				}
				runtime.Gosched()
				running.Add(-1)
				ran.Add(1)
				return nil
			})
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Do: %v", err)
				}
				gaveUp.Add(1)
			}
		})
	}
	wg.Wait()
	if got := ran.Load() + gaveUp.Load(); got != 1000 {
		t.Fatalf("%d callers accounted for, want 1000", got)
	}
	if q.Queued() != 0 {
		t.Fatalf("queue holds %d waiters after all returned", q.Queued())
	}
}
