package remote

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/workspace"
)

// Sessions are told in order, each once: up, its end before the next
// one's up (however the client noticed it died), and the last one's end
// at Close.
func TestSessionsAreToldInOrder(t *testing.T) {
	srv := rpc.NewServer(rpc.ServerOptions{Config: rpc.Config{ID: "container"}})
	defer srv.Close()
	watch := &sessions{}
	var mu sync.Mutex
	var got []string
	n := 0
	watch.fn = func(c workspace.SessionChange) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%v %v", c.Connected, c.Err != nil))
	}
	c := rpc.NewClient(rpc.ClientOptions{
		Config:    rpc.Config{ID: "server"},
		OnSession: watch.up,
		Dial: func(context.Context) (rpc.Conn, error) {
			n++
			client, _ := srv.Pipe()
			return client, nil
		},
	})
	ctx := context.Background()
	for range 3 {
		s, _, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // the next Session dials again
		<-s.Done()
	}
	if _, _, err := c.Session(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	watch.wait()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"true false", "false true", "true false", "false true", "true false", "false true", "true false", "false true"}
	if !slices.Equal(got, want) || n != 4 {
		t.Errorf("told %q over %d dials, want %q", got, n, want)
	}
}
