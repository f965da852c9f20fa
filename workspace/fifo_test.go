package workspace

import (
	"context"
	"errors"
	"testing"
)

func TestFIFORunsInArrivalOrder(t *testing.T) {
	var q fifo
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- q.do(ctx, func() error {
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
			results <- q.do(ctx, func() error { order = append(order, i); return nil })
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
func waitForQueue(t *testing.T, q *fifo, n int) {
	t.Helper()
	for q.queued() < n {
		yieldOnce()
	}
}

func TestFIFOCancelledWaiterLeaves(t *testing.T) {
	var q fifo
	hold := make(chan struct{})
	started := make(chan struct{})
	go q.do(context.Background(), func() error { close(started); <-hold; return nil })
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.do(ctx, func() error { t.Error("cancelled waiter ran"); return nil }) }()
	waitForQueue(t, &q, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(hold)
	// The queue is usable afterwards.
	ran := false
	if err := q.do(context.Background(), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after cancel: err %v ran %v", err, ran)
	}
}
