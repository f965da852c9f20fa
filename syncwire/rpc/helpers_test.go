package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

const (
	methodEcho   Method = 300 // replies with the request body
	methodStream Method = 301 // registered by the tests that use it
	methodFail   Method = 302 // fails with errTestMissing
	methodBlock  Method = 303 // waits for its context to end
	methodRange  Method = 306 // streams body[0] one-byte messages
)

// testConfig has short timers so failure paths finish fast.
func testConfig() Config {
	return Config{PingInterval: 200 * time.Millisecond, PingTimeout: 2 * time.Second, CallTimeout: 20 * time.Second}
}

// testServer serves the test methods.
func testServer(t *testing.T, opts ServerOptions) *Server {
	if opts.Config.PingInterval == 0 {
		opts.Config = testConfig()
	}
	opts.ID = "server-id"
	srv := NewServer(opts)
	srv.Handle(methodEcho, func(ctx context.Context, c *Incoming) error { return c.Reply(c.Body) })
	srv.Handle(methodFail, func(ctx context.Context, c *Incoming) error {
		return fmt.Errorf("stat %s: %w", c.Body, errTestMissing)
	})
	srv.Handle(methodBlock, func(ctx context.Context, c *Incoming) error {
		<-ctx.Done()
		return ctx.Err()
	})
	srv.Handle(methodRange, func(ctx context.Context, c *Incoming) error {
		if len(c.Body) != 1 {
			return fmt.Errorf("%w: range body of %d bytes", ErrProtocol, len(c.Body))
		}
		if err := c.ReplyStream(nil); err != nil {
			return err
		}
		for i := range c.Body[0] {
			if err := c.Send(ctx, []byte{i}); err != nil {
				return err
			}
		}
		return nil
	})
	return srv
}

// recvAll makes a call with a response stream and returns its messages.
func recvAll(ctx context.Context, s *Session, m Method, body []byte) ([][]byte, error) {
	o, err := s.Open(ctx, m, body, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	var out [][]byte
	for {
		p, err := o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}

func wsClient(t *testing.T, url, token string) *Client {
	t.Helper()
	cfg := testConfig()
	cfg.ID = "client-id"
	c := NewClient(ClientOptions{Config: cfg, URL: url, Token: token})
	t.Cleanup(func() { c.Close() })
	return c
}

// pipePair serves srv on one end of a Pipe and returns a client with the
// other end.
func pipePair(t *testing.T, srv *Server) (*Client, *PipeConn, *PipeConn) {
	t.Helper()
	return pipePairConfig(t, srv, testConfig())
}

func pipePairConfig(t *testing.T, srv *Server, cfg Config) (*Client, *PipeConn, *PipeConn) {
	t.Helper()
	var cEnd, sEnd *PipeConn
	cfg.ID = "client-id"
	c := NewClient(ClientOptions{Config: cfg, Dial: func(context.Context) (Conn, error) {
		cEnd, sEnd = srv.Pipe()
		return cEnd, nil
	}})
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	session(t, c)
	return c, cEnd, sEnd
}

func session(t testing.TB, c *Client) *Session {
	t.Helper()
	s, _, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
