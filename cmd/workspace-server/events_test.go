package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/workspace/events"
)

// syncBuffer is a bytes.Buffer a verb writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// follow runs a verb that follows until interrupted, waits for its output
// to satisfy enough, interrupts it and returns its output; it must exit 0.
func (c *cli) follow(enough func(out string) bool, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, args, strings.NewReader(""), &out, &errb) }()
	testutil.WaitFor(c.t, strings.Join(args, " "), 30*time.Second, func() bool { return enough(out.String()) })
	cancel()
	if got := <-code; got != exitOK {
		c.t.Fatalf("%v: exit %d after the interrupt\nstderr: %s", args, got, errb.String())
	}
	return out.String()
}

func TestEventsVerb(t *testing.T) {
	c := newCLI(t, nil)
	c.ok("", "pull")
	c.ok("", "exec", "--", "write", "/a", "x")

	// Everything retained, one readable line each, then it follows.
	out := c.follow(func(s string) bool {
		return strings.Contains(s, "exec.exited") && strings.Count(s, "sync.finished") >= 3
	},
		"events", "--after", "0")
	for _, want := range []string{"sync.started", "default", "pull #1 started", "push #", "exec.started", "exited 0 after",
		"pull #3: 1 entries, 1 objects (1 B)"} {
		if !strings.Contains(out, want) {
			t.Errorf("events lacks %q:\n%s", want, out)
		}
	}

	// --json: one event object a line; --types: only those.
	out = c.follow(func(s string) bool { return strings.Count(s, "\n") >= 2 }, "events", "--after", "0", "--json", "--types", "exec")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || !strings.HasPrefix(ev.Type, "exec.") || ev.ID == "" || len(ev.Data) == 0 {
			t.Errorf("--json --types exec line %q: %+v %v", line, ev, err)
		}
	}

	// From now: what happens after it started.
	var from syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "--types", "verify"}, strings.NewReader(""), &from, &bytes.Buffer{})
	}()
	testutil.WaitFor(t, "a verify line", 30*time.Second, func() bool {
		c.ok("", "verify")
		return strings.Contains(from.String(), "verify: converged")
	})
	cancel()
	if code := <-done; code != exitOK || strings.Contains(from.String(), "exec") {
		t.Errorf("events from now: exit %d\n%s", code, from.String())
	}

	if r := c.run("", "events", "--types", "syncs"); r.code != exitUsage || !strings.Contains(r.stderr, "syncs") {
		t.Errorf("a misspelt --types: %+v", r)
	}
	if r := c.run("", "events", "--after", "yesterday"); r.code != exitError || !strings.Contains(r.stderr, "EINVAL") {
		t.Errorf("a bad --after: %+v", r)
	}
	if r := c.run("", "events", "--help"); r.code != exitOK || !strings.Contains(r.stdout, "workspace-server events --after 0 --types sync") {
		t.Errorf("events --help: %+v", r)
	}
}

func TestEventLines(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 14, 3, 0, time.Local)
	for _, tc := range []struct {
		typ, runtime, data, want string
	}{
		{"sync.started", "gpu", `{"sync":7,"parent":6,"op":"pull"}`, "gpu       pull #7 started (in tick #6)"},
		{"sync.progress", "default", `{"sync":7,"op":"bootstrap","entries":512,"objects":40,"bytes":2048,"batches":2,"total":10000}`,
			"bootstrap #7: 512/10000 entries, 40 objects (2.0 KiB), 2 batches"},
		{"sync.finished", "default", `{"sync":7,"op":"push","error":"computerd unavailable","errno":"EPEER_UNAVAILABLE"}`, "push #7 failed: computerd unavailable"},
		{"exec.started", "default", `{"exec_id":"r:3","argv":["make","test"],"cwd":"/src"}`, "r:3 make test (in /src)"},
		{"exec.exited", "default", `{"exec_id":"r:3","exit_code":137,"signal":9,"duration_ns":2000000000}`, "r:3 killed by signal 9 after 2s"},
		{"sync.pending", "default", `{"exec_id":"r:3","error":"reset","since":"2026-12-01T20:00:00Z"}`, "a pull is pending for exec r:3: reset"},
		{"sync.pending_cleared", "default", `{"exec_id":"r:3","outcome":"abandoned"}`, "the pending pull for exec r:3 is abandoned"},
		{"conflict", "default", `{"sync":9,"conflicts":2,"paths":["/a","/b"]}`, "pull #9 recorded 2 conflicts: /a /b"},
		{"verify", "default", `{"converged":false,"differences":["/x"],"checked_at":"2026-12-01T20:00:00Z"}`, "verify: diverged: /x"},
		{"runtime.lost", "default", `{"runtime_id":"r","error":"EOF"}`, "lost computerd r: EOF"},
		{"gap", "", `{"after":"a-1","oldest":"b-1","reason":"restart"}`, "-         missed some events (the server restarted); going on from b-1"},
		{"sync.started", "default", `not json`, "not json"},
	} {
		got := eventLine(events.Event{Time: at, Type: tc.typ, Runtime: tc.runtime, Data: json.RawMessage(tc.data)})
		if !strings.HasPrefix(got, "2026-12-01 20:14:03.000  "+tc.typ) || !strings.HasSuffix(got, tc.want) {
			t.Errorf("%s %s:\n got %q\nwant ...%q", tc.typ, tc.data, got, tc.want)
		}
	}
}
