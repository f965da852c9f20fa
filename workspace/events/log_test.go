package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
)

// drain reads what the subscription has now, without waiting: types, with
// a gap shown as "gap:REASON:MISSED:OLDEST-SEQ" and an event as its seq.
func drain(t *testing.T, l *Log, s *Subscription) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var got []string
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, context.Canceled) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, describe(t, l, ev))
	}
}

func describe(t *testing.T, l *Log, ev Event) string {
	t.Helper()
	if ev.Type == TypeGap {
		var g Gap
		if err := json.Unmarshal(ev.Data, &g); err != nil {
			t.Fatal(err)
		}
		if ev.ID != "" {
			t.Errorf("a gap event has the id %q", ev.ID)
		}
		return fmt.Sprintf("gap:%s:%d:%s", g.Reason, g.Missed, strings.TrimPrefix(g.Oldest, l.Epoch()+"-"))
	}
	return strings.TrimPrefix(ev.ID, l.Epoch()+"-")
}

func publishN(l *Log, n int) {
	for i := range n {
		l.Publish("sync.progress", "default", map[string]int{"i": i})
	}
}

func TestSubscribeFrom(t *testing.T) {
	l := New(Options{MaxEvents: 4})
	publishN(l, 6) // retains 3..6
	other := New(Options{}).Epoch()
	for _, tc := range []struct {
		name, after string
		want        []string
	}{
		{"from now", "", nil},
		{"from the first", "0", []string{"gap:behind:2:3", "3", "4", "5", "6"}},
		{"after a retained id", l.Epoch() + "-4", []string{"5", "6"}},
		{"after the newest", l.Epoch() + "-6", nil},
		{"after the oldest retained", l.Epoch() + "-3", []string{"4", "5", "6"}},
		{"just before the oldest", l.Epoch() + "-2", []string{"3", "4", "5", "6"}},
		{"after a dropped id", l.Epoch() + "-1", []string{"gap:behind:1:3", "3", "4", "5", "6"}},
		{"an id of another epoch", other + "-4", []string{"gap:restart:0:3", "3", "4", "5", "6"}},
		{"an id from this log's future", l.Epoch() + "-99", []string{"gap:restart:0:3", "3", "4", "5", "6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := l.Subscribe(tc.after)
			if err != nil {
				t.Fatal(err)
			}
			if got := drain(t, l, s); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBadIDsAreRefused(t *testing.T) {
	l := New(Options{})
	for _, id := range []string{"x", "1", "-1", "abc-1", "0123456g-1", "01234567-", "01234567-x", "01234567--1",
		"01234567-1-2", "01234567-99999999999999999999", "ABCDEF01-1", strings.Repeat("0", 65)} {
		if _, err := l.Subscribe(id); !errors.Is(err, ErrBadID) {
			t.Errorf("Subscribe(%q): %v, want ErrBadID", id, err)
		}
	}
}

// A Last-Event-ID from before a restart (a log with another epoch)
// replays everything the new log retains, after a gap that names it.
func TestAnIDFromBeforeARestart(t *testing.T) {
	before := New(Options{})
	last := before.Publish("exec.started", "default", nil)
	after := New(Options{})
	if after.Epoch() == before.Epoch() {
		t.Fatal("two logs share an epoch")
	}
	first := after.Publish("runtime.connected", "default", nil)
	s, err := after.Subscribe(last.ID)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var g Gap
	if err := json.Unmarshal(ev.Data, &g); err != nil || ev.Type != TypeGap {
		t.Fatalf("first event %s %s, want a gap", ev.Type, ev.Data)
	}
	if want := (Gap{After: last.ID, Oldest: first.ID, Reason: GapRestart}); g != want {
		t.Errorf("gap %+v, want %+v", g, want)
	}
	if ev, _ := s.Next(context.Background()); ev.ID != first.ID {
		t.Errorf("after the gap %q, want %q", ev.ID, first.ID)
	}
	// Nothing retained yet after a restart: the gap names no oldest id.
	empty := New(Options{})
	s, _ = empty.Subscribe(last.ID)
	if got := drain(t, empty, s); !slices.Equal(got, []string{"gap:restart:0:"}) {
		t.Errorf("an empty log answers %q", got)
	}
}

func TestRetention(t *testing.T) {
	clock := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	size := len(New(Options{Now: now}).Publish("t", "", map[string]int{"i": 0}).JSON())
	for _, tc := range []struct {
		name string
		opts Options
		step time.Duration // the clock moves this much before each publish
		want []string      // retained, read from the first
	}{
		{"by count", Options{MaxEvents: 3}, 0, []string{"gap:behind:2:3", "3", "4", "5"}},
		{"by bytes", Options{MaxBytes: int64(2 * size)}, 0, []string{"gap:behind:3:4", "4", "5"}},
		{"by age", Options{MaxAge: 150 * time.Second}, time.Minute, []string{"gap:behind:2:3", "3", "4", "5"}},
		{"all kept", Options{}, time.Minute, []string{"1", "2", "3", "4", "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clock
			tc.opts.Now = func() time.Time { return clock }
			l := New(tc.opts)
			for i := range 5 {
				clock = clock.Add(tc.step)
				l.Publish("t", "", map[string]int{"i": i})
			}
			s, _ := l.Subscribe("0")
			if got := drain(t, l, s); !slices.Equal(got, tc.want) {
				t.Errorf("retained %q, want %q", got, tc.want)
			}
		})
	}
}

// The ring is compacted as it drops events, so a long-lived log holds
// what it retains and little more.
func TestRetentionBoundsMemory(t *testing.T) {
	l := New(Options{MaxEvents: 10})
	publishN(l, 100_000)
	l.mu.Lock()
	slots, bytes := cap(l.ring), l.bytes
	l.mu.Unlock()
	if slots > 200 {
		t.Errorf("%d event slots for 10 events retained", slots)
	}
	if one := int64(len(l.Publish("sync.progress", "default", map[string]int{"i": 99999}).JSON())); bytes > 11*one { // times and ids vary in length
		t.Errorf("%d bytes accounted for 10 events of about %d", bytes, one)
	}
}

func TestEventEncoding(t *testing.T) {
	l := New(Options{})
	ev := l.Publish("sync.finished", "gpu", map[string]any{"op": "pull", "entries": 3})
	var back Event
	if err := json.Unmarshal(ev.JSON(), &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != ev.ID || back.Type != "sync.finished" || back.Runtime != "gpu" || !back.Time.Equal(ev.Time) ||
		string(back.Data) != `{"entries":3,"op":"pull"}` || string(ev.Data) != string(back.Data) {
		t.Errorf("decoded %+v from %s", back, ev.JSON())
	}
	if string(back.JSON()) != string(ev.JSON()) {
		t.Errorf("re-encoded %s, published %s", back.JSON(), ev.JSON())
	}
	none := l.Publish("runtime.lost", "", nil)
	if strings.Contains(string(none.JSON()), "data") || strings.Contains(string(none.JSON()), "runtime\"") {
		t.Errorf("an event without data or runtime: %s", none.JSON())
	}
	huge := l.Publish("verify", "", map[string]string{"x": strings.Repeat("a", 2*MaxEventBytes)})
	if len(huge.JSON()) > MaxEventBytes || !strings.Contains(string(huge.Data), `"truncated":true`) {
		t.Errorf("an oversized event is published as %d bytes: %.200s", len(huge.JSON()), huge.JSON())
	}
	bad := l.Publish("verify", "", map[string]any{"f": func() {}})
	if !strings.Contains(string(bad.Data), `"error"`) {
		t.Errorf("data that does not encode is published as %s", bad.Data)
	}
}

// A subscriber that reads nothing while the log turns over is told how
// many events it missed and from where it goes on; the publisher and a
// subscriber that keeps up are not held up by it.
func TestSlowSubscriberIsToldOfTheGap(t *testing.T) {
	l := New(Options{MaxEvents: 100})
	slow, _ := l.Subscribe("")
	fast, _ := l.Subscribe("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := make(chan int64, 1)
	var n atomic.Int64
	go func() {
		for n.Load() < 1000 {
			ev, err := fast.Next(ctx)
			if err != nil || ev.Type == TypeGap {
				break
			}
			n.Add(1)
		}
		read <- n.Load()
	}()
	for i := range 1000 {
		l.Publish("sync.progress", "", map[string]int{"i": i})
		if i%100 == 99 {
			// The fast reader keeps up: it reads each hundred before the next.
			testutil.WaitFor(t, "the fast reader", 10*time.Second, func() bool { return n.Load() > int64(i) })
		}
	}
	if n := <-read; n != 1000 {
		t.Fatalf("the subscriber that kept up read %d events, want 1000 and no gap", n)
	}
	if got := drain(t, l, slow); len(got) != 101 || got[0] != "gap:behind:900:901" || got[1] != "901" || got[100] != "1000" {
		t.Errorf("the slow subscriber read %d events starting %q, want a gap of 900 then 901..1000", len(got), got[:min(3, len(got))])
	}
}

// A thousand subscribers, half from the first event and half from the
// middle (from now, when half was published), read a concurrent
// publisher's events in order, none missing. Run with -race.
func TestThousandConcurrentSubscribers(t *testing.T) {
	const subscribers, events = 1000, 2000
	l := New(Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publishN(l, events/2)
	subs := make([]*Subscription, subscribers)
	for i := range subs {
		after := "0"
		if i%2 == 1 {
			after = ""
		}
		var err error
		if subs[i], err = l.Subscribe(after); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, subscribers)
	for i, s := range subs {
		wg.Go(func() {
			prev := uint64(0)
			if i%2 == 1 {
				prev = events / 2
			}
			for prev < events {
				ev, err := s.Next(ctx)
				if err != nil {
					errs <- fmt.Errorf("subscriber %d after %d: %w", i, prev, err)
					return
				}
				if _, seq, err := parseID(ev.ID); err != nil || seq != prev+1 {
					errs <- fmt.Errorf("subscriber %d: %s %q after %d", i, ev.Type, ev.ID, prev)
					return
				}
				prev++
			}
		})
	}
	publishN(l, events/2) // while they read
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
