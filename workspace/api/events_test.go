package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
	"github.com/wsync/wsync/workspace/events"
)

// message is one SSE message as it came: its fields, or a comment.
type message struct {
	id, event, data string
	hasID, comment  bool
}

// stream is one open event stream of a test.
type stream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// openStream opens GET .../events with hdr (pairs) and the query q, and
// checks it is a stream. Cleanup closes it.
func (e *env) openStream(t *testing.T, ws, q string, hdr ...string) *stream {
	t.Helper()
	resp, cancel := e.get(t, ws, q, hdr...)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-store" {
		t.Errorf("Content-Type %q, Cache-Control %q", ct, cc)
	}
	s := &stream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

// get sends GET .../events; the caller cancels.
func (e *env) get(t *testing.T, ws, q string, hdr ...string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/workspaces/"+ws+"/events"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, func() {
		cancel()
		resp.Body.Close()
	}
}

func (s *stream) close() { s.cancel() }

// next reads the next message, comments included.
func (s *stream) next(t *testing.T) message {
	t.Helper()
	m, err := s.read()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// read is next for a goroutine of a test: it returns the error.
func (s *stream) read() (message, error) {
	var m message
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return m, fmt.Errorf("stream: %w (after %q)", err, line)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return m, nil
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			m.comment = true
		case "id":
			m.id, m.hasID = value, true
		case "event":
			m.event = value
		case "data":
			m.data = value
		default:
			return m, fmt.Errorf("unknown field in %q", line)
		}
	}
}

// event reads up to the next event (skipping comments and positions) and
// checks its message and its JSON agree.
func (s *stream) event(t *testing.T) events.Event {
	t.Helper()
	for {
		m := s.next(t)
		if m.data == "" {
			continue
		}
		var ev events.Event
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			t.Fatalf("data %q: %v", m.data, err)
		}
		if ev.Type != m.event || ev.ID != m.id || (ev.ID != "") != m.hasID {
			t.Fatalf("message id %q event %q carries %s", m.id, m.event, m.data)
		}
		return ev
	}
}

// until reads events up to the first of type typ and returns them all.
func (s *stream) until(t *testing.T, typ string) []events.Event {
	t.Helper()
	var out []events.Event
	for {
		ev := s.event(t)
		out = append(out, ev)
		if ev.Type == typ {
			return out
		}
	}
}

func ids(evs []events.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type+" "+ev.ID)
	}
	return out
}

func decodeData[T any](t *testing.T, ev events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		t.Fatalf("%s: %v", ev.Data, err)
	}
	return v
}

// settledEnv is an env whose default workspace has pulled once (so its
// fake exists and a push pulls nothing first).
func settledEnv(t *testing.T, opts api.Options) (*env, *workspace.Workspace) {
	t.Helper()
	e := newEnv(t, opts)
	st, b, _ := e.req(t, "POST", "/v1/workspaces/default/pull", nil)
	wantStatus(t, "pull", st, 200, b)
	w, err := e.m.Workspace("default")
	if err != nil {
		t.Fatal(err)
	}
	return e, w
}

// A client reading the stream while a pull runs sees the pull start,
// progress and finish in order, with the counts of the report the pull
// answered with.
func TestEventStreamShowsAPull(t *testing.T) {
	e, _ := settledEnv(t, api.Options{})
	s := e.openStream(t, "default", "")
	if m := s.next(t); !m.hasID || m.data != "" || !strings.HasSuffix(m.id, "-2") {
		t.Fatalf("first message %+v, want the position after the settling pull's two events", m)
	}
	fake := e.remotes.Fake("default")
	if err := fake.Container.MkdirPath(context.Background(), "src", 0o755, true); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := fake.Container.WriteFile(context.Background(), fmt.Sprintf("src/f%02d.go", i), []byte(strings.Repeat("x", 100*i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, b, _ := e.req(t, "POST", "/v1/workspaces/default/pull", nil)
	wantStatus(t, "pull", st, 200, b)
	var rep workspace.SyncReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	evs := s.until(t, workspace.EventSyncFinished)
	if evs[0].Type != workspace.EventSyncStarted || decodeData[workspace.SyncStarted](t, evs[0]).Op != "pull" {
		t.Fatalf("events %q, want the pull's start first", ids(evs))
	}
	var last workspace.Progress
	for _, ev := range evs[1 : len(evs)-1] {
		p := decodeData[workspace.SyncProgress](t, ev)
		if ev.Type != workspace.EventSyncProgress || p.Entries < last.Entries || p.Bytes < last.Bytes || p.Batches < last.Batches {
			t.Fatalf("between start and finish: %s %s after %+v", ev.Type, ev.Data, last)
		}
		last = p.Progress
	}
	done := decodeData[workspace.SyncFinished](t, evs[len(evs)-1])
	if done.Entries != rep.Entries || done.Objects != rep.Objects || done.Bytes != rep.Bytes || done.Batches != rep.Batches || rep.Entries != 21 {
		t.Errorf("finished %+v, the pull answered %+v", done.SyncReport, rep)
	}
	if len(evs) > 2 && (last.Entries != rep.Entries || last.Bytes != rep.Bytes || last.Objects != rep.Objects) {
		t.Errorf("last progress %+v, the pull answered %+v", last, rep)
	}
	// Ids follow one another.
	for i := 1; i < len(evs); i++ {
		if a, b := seqOf(t, evs[i-1].ID), seqOf(t, evs[i].ID); b != a+1 {
			t.Errorf("%s after %s", evs[i].ID, evs[i-1].ID)
		}
	}
}

func seqOf(t *testing.T, id string) int {
	t.Helper()
	_, n, _ := strings.Cut(id, "-")
	var seq int
	if _, err := fmt.Sscan(n, &seq); err != nil {
		t.Fatalf("id %q", id)
	}
	return seq
}

// A client that comes back with Last-Event-ID gets exactly what it missed;
// ?after= does the same for curl, and the header wins over it (a browser
// reconnects to the URL it first opened).
func TestEventStreamResumesWithLastEventID(t *testing.T) {
	e, w := settledEnv(t, api.Options{})
	ref, err := w.Events().Subscribe("0")
	if err != nil {
		t.Fatal(err)
	}
	s := e.openStream(t, "default", "")
	e.req(t, "POST", "/v1/workspaces/default/exec", strings.NewReader(`{"shell":"write /a x"}`))
	first := s.until(t, workspace.EventExecExited)
	s.close()
	// What happens while it is away.
	e.req(t, "POST", "/v1/workspaces/default/exec", strings.NewReader(`{"shell":"write /b y"}`))
	e.req(t, "POST", "/v1/workspaces/default/verify", nil)

	var all []events.Event
	for {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ev, err := ref.Next(ctx)
		if err != nil {
			break
		}
		all = append(all, ev)
	}
	last := first[len(first)-1]
	i := slices.IndexFunc(all, func(ev events.Event) bool { return ev.ID == last.ID })
	missed := all[i+1:]
	if len(missed) < 5 {
		t.Fatalf("only %q happened after %s", ids(missed), last.ID)
	}
	for _, tc := range []struct {
		name, q string
		hdr     []string
	}{
		{"Last-Event-ID", "", []string{"Last-Event-ID", last.ID}},
		{"after", "?after=" + last.ID, nil},
		{"the header wins", "?after=" + first[0].ID, []string{"Last-Event-ID", last.ID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := e.openStream(t, "default", tc.q, tc.hdr...)
			var got []events.Event
			for range missed {
				got = append(got, s.event(t))
			}
			if !slices.Equal(ids(got), ids(missed)) {
				t.Errorf("resumed with\n%q, missed\n%q", ids(got), ids(missed))
			}
		})
	}
}

// An id from before a server restart (another epoch) gets a gap event,
// without an id, then every event retained.
func TestEventStreamAfterARestart(t *testing.T) {
	e, w := settledEnv(t, api.Options{})
	old := events.New(events.Options{}).Publish("sync.started", "default", nil)
	if strings.HasPrefix(old.ID, w.Events().Epoch()) {
		t.Skip("two epochs met")
	}
	s := e.openStream(t, "default", "", "Last-Event-ID", old.ID)
	m := s.next(t)
	for m.comment {
		m = s.next(t)
	}
	if m.hasID || m.event != events.TypeGap {
		t.Fatalf("first message %+v, want a gap without an id", m)
	}
	var ev events.Event
	if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
		t.Fatal(err)
	}
	g := decodeData[events.Gap](t, ev)
	if g.Reason != events.GapRestart || g.After != old.ID || g.Oldest != w.Events().Epoch()+"-1" {
		t.Errorf("gap %+v", g)
	}
	if ev := s.event(t); ev.ID != w.Events().Epoch()+"-1" {
		t.Errorf("after the gap %s, want the first event retained", ev.ID)
	}
}

// A client that stops reading is dropped once a write to it cannot finish
// in the write timeout; the publisher and a reader that keeps up go on,
// and the dropped client's slot is free again.
func TestSlowEventClientIsDropped(t *testing.T) {
	e, w := settledEnv(t, api.Options{StreamWriteTimeout: 200 * time.Millisecond, MaxEventStreams: 2})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/workspaces/default/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
	br := bufio.NewReader(conn)
	if status, err := br.ReadString('\n'); err != nil || !strings.Contains(status, "200") {
		t.Fatalf("slow client: %q %v", status, err)
	}
	fast := e.openStream(t, "default", "")
	big := strings.Repeat("x", 60<<10)
	published := 0
	read := make(chan error, 1)
	go func() {
		for {
			m, err := fast.read()
			if err != nil || m.event == "test.done" {
				read <- err
				return
			}
		}
	}()
	// The slow client stops reading; publish until its stream is dropped
	// and its slot lets a third stream in.
	testutil.WaitFor(t, "the slow client's drop", time.Minute, func() bool {
		for range 100 {
			w.Events().Publish("test.big", "", map[string]string{"x": big})
			published++
		}
		resp, cancel := e.get(t, "default", "")
		defer cancel()
		return resp.StatusCode == http.StatusOK
	})
	w.Events().Publish("test.done", "", nil)
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("the reader that kept up: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the reader that kept up did not get every event")
	}
	t.Logf("dropped after %d events of 60 KiB", published)
}

// Streams per workspace are bounded: one past the bound is 429 EBUSY with
// Retry-After, another workspace is not affected, and a closed stream
// frees its slot.
func TestEventStreamCap(t *testing.T) {
	e := newEnv(t, api.Options{MaxEventStreams: 2})
	st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"other"}`))
	wantStatus(t, "create", st, 201, b)
	a := e.openStream(t, "default", "")
	e.openStream(t, "default", "")
	resp, cancel := e.get(t, "default", "")
	b, _ = io.ReadAll(resp.Body)
	cancel()
	if resp.StatusCode != http.StatusTooManyRequests || errnoOf(t, b) != "EBUSY" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third stream: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	e.openStream(t, "other", "")
	a.close()
	testutil.WaitFor(t, "the closed stream's slot", 10*time.Second, func() bool {
		resp, cancel := e.get(t, "default", "")
		defer cancel()
		return resp.StatusCode == http.StatusOK
	})
}

// Many clients follow one workspace at once, each getting every event in
// order.
func TestManyEventStreams(t *testing.T) {
	const clients, n = 200, 50
	e, w := settledEnv(t, api.Options{MaxEventStreams: clients})
	streams := make([]*stream, clients)
	for i := range streams {
		streams[i] = e.openStream(t, "default", "")
		streams[i].next(t) // the position: it is subscribed
	}
	var want []string
	for i := range n {
		want = append(want, w.Events().Publish("test.n", "", map[string]int{"i": i}).ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, s := range streams {
		wg.Go(func() {
			for j := range n {
				m, err := s.read()
				if err != nil || m.id != want[j] {
					errs <- fmt.Errorf("client %d: event %d is %q (%v), want %q", i, j, m.id, err, want[j])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A stream that has nothing to send sends a comment every heartbeat, and
// one with a filter sends only the types it names (and gaps).
func TestEventStreamHeartbeatAndFilter(t *testing.T) {
	e, w := settledEnv(t, api.Options{EventHeartbeat: 20 * time.Millisecond})
	s := e.openStream(t, "default", "?types=exec,verify")
	s.next(t) // the position
	for range 3 {
		if m := s.next(t); !m.comment || m.data != "" || m.hasID {
			t.Fatalf("an idle stream sent %+v, want a comment", m)
		}
	}
	w.Events().Publish(workspace.EventSyncStarted, "default", nil)
	w.Events().Publish(workspace.EventVerify, "default", nil)
	if ev := s.event(t); ev.Type != workspace.EventVerify {
		t.Errorf("a filtered stream sent %s", ev.Type)
	}
}

func TestEventStreamRefusesBadInput(t *testing.T) {
	e := newEnv(t, api.Options{})
	for _, tc := range []struct {
		name, ws, q string
		hdr         []string
		status      int
		errno       string
	}{
		{"a bad Last-Event-ID", "default", "", []string{"Last-Event-ID", "yesterday"}, 400, "EINVAL"},
		{"a bad after", "default", "?after=1-2-3", nil, 400, "EINVAL"},
		{"a huge id", "default", "", []string{"Last-Event-ID", strings.Repeat("9", 4096)}, 400, "EINVAL"},
		{"an unknown type", "default", "?types=sync,exce", nil, 400, "EINVAL"},
		{"a huge filter", "default", "?types=" + strings.Repeat("sync,", 1000), nil, 400, "EINVAL"},
		{"an unknown workspace", "nope", "", nil, 404, "ENOENT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, cancel := e.get(t, tc.ws, tc.q, tc.hdr...)
			defer cancel()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || errnoOf(t, b) != tc.errno {
				t.Errorf("%d %s, want %d %s", resp.StatusCode, b, tc.status, tc.errno)
			}
		})
	}
	for _, auth := range []string{"", "Bearer wrong"} {
		st, b, _ := testutil.Request(t, "GET", e.srv.URL+"/v1/workspaces/default/events", auth, nil)
		if st != 401 || errnoOf(t, b) != "EAUTH" {
			t.Errorf("auth %q: %d %s", auth, st, b)
		}
	}
}

// The server's shutdown ends every stream (http.Server.Shutdown would
// wait for them otherwise) and refuses new ones.
func TestEventStreamsEndAtShutdown(t *testing.T) {
	m := newEnv(t, api.Options{}).m
	a, err := api.New(api.Options{Manager: m, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: httptest.NewServer(a), m: m}
	t.Cleanup(e.srv.Close)
	s := e.openStream(t, "default", "")
	s.next(t)
	a.EndStreams()
	for {
		_, err := s.r.ReadString('\n')
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	resp, cancel := e.get(t, "default", "")
	defer cancel()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || errnoOf(t, b) != "ESHUTDOWN" {
		t.Errorf("a stream after the shutdown began: %d %s", resp.StatusCode, b)
	}
}

// The Go client follows the stream across a dropped connection: it comes
// back with Last-Event-ID and misses nothing, twice over.
func TestClientEventsReconnect(t *testing.T) {
	e, w := settledEnv(t, api.Options{})
	cl, err := client.New(e.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- cl.Workspace("default").Events(ctx, "", func(ev events.Event) error {
			mu.Lock()
			got = append(got, ev.Type+" "+ev.ID)
			mu.Unlock()
			return nil
		})
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	// Subscribed once a probe comes through.
	testutil.WaitFor(t, "the client's stream", 10*time.Second, func() bool {
		w.Events().Publish("test.probe", "", nil)
		return count() > 0
	})
	n0 := count()
	var want []string
	for round := range 3 {
		for i := range 5 {
			want = append(want, "test.n "+w.Events().Publish("test.n", "", map[string]int{"round": round, "i": i}).ID)
		}
		e.srv.CloseClientConnections()
	}
	testutil.WaitFor(t, "every event", 30*time.Second, func() bool { return count() >= n0+len(want) })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Events ended with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var after []string
	for _, g := range got[n0:] {
		if !strings.HasPrefix(g, "test.probe") {
			after = append(after, g)
		}
	}
	if !slices.Equal(after, want) {
		t.Errorf("the client got\n%q\nwant\n%q", after, want)
	}

	// An answer that will not change ends it.
	err = cl.Workspace("default").Events(context.Background(), "not-an-id", func(events.Event) error { return nil })
	if !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("a bad id: %v", err)
	}
	// fn's error ends it, as it is.
	stop := errors.New("stop")
	err = cl.Workspace("default").Events(context.Background(), "0", func(events.Event) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("fn's error: %v", err)
	}
}

// Against a real computerd (its FUSE mount, a loopback WebSocket through
// a proxy that can cut it) the stream shows the runtime connecting, an
// exec and the pull after it with the counts of the exec's report, and the
// runtime lost when the connection is cut.
func TestEventStreamOfARealRuntime(t *testing.T) {
	const cdToken = "computerd-token"
	ctx := testutil.Context(t, 2*time.Minute)
	d := computertest.Start(t, computer.Config{Token: cdToken})
	p := newProxy(t, d.Addr())
	e, ws := peerEnv(t, "ws://"+p.addr()+"/sync", cdToken)
	s := e.openStream(t, "default", "")
	rep, err := ws.Exec(ctx, workspace.ExecSpec{Shell: "mkdir src && for i in $(seq 300); do echo $i > src/f$i; done"}, nil)
	if err != nil || rep.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", rep, err)
	}
	evs := s.until(t, workspace.EventExecExited)
	// The first sync dials: the runtime connects inside it.
	if evs[0].Type != workspace.EventSyncStarted || evs[1].Type != workspace.EventConnected ||
		decodeData[workspace.RuntimeEvent](t, evs[1]).RuntimeID != rep.RuntimeID {
		t.Fatalf("events %q, want the runtime %s connected in the first sync", ids(evs), rep.RuntimeID)
	}
	if ex := decodeData[workspace.ExecExited](t, evs[len(evs)-1]); ex.ExecID != rep.ExecID || ex.ExitCode != 0 {
		t.Errorf("exec.exited %+v, the exec answered %+v", ex, rep.ExecResult)
	}
	evs = s.until(t, workspace.EventSyncFinished)
	started := decodeData[workspace.SyncStarted](t, evs[0])
	done := decodeData[workspace.SyncFinished](t, evs[len(evs)-1])
	if started.Op != "pull" || done.Sync != started.Sync || done.Entries != rep.Pulled.Entries || done.Bytes != rep.Pulled.Bytes || rep.Pulled.Entries != 301 {
		t.Fatalf("the pull after the command: %q, finished %+v, the exec pulled %+v", ids(evs), done, rep.Pulled)
	}
	var last workspace.Progress
	for _, ev := range evs[1 : len(evs)-1] {
		p := decodeData[workspace.SyncProgress](t, ev)
		if p.Sync != started.Sync || p.Entries < last.Entries || p.Batches <= last.Batches {
			t.Fatalf("progress %s after %+v", ev.Data, last)
		}
		last = p.Progress
	}
	if len(evs) > 2 && last.Entries != done.Entries {
		t.Errorf("the last progress has %d entries, the pull %d", last.Entries, done.Entries)
	}

	p.cut()
	lost := s.until(t, workspace.EventLost)
	if l := decodeData[workspace.RuntimeEvent](t, lost[len(lost)-1]); l.RuntimeID != rep.RuntimeID || l.Error == "" {
		t.Errorf("runtime.lost %+v", l)
	}
}
