package converge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// callStats counts what the calls of one operation cost.
// It is safe for concurrent use; read its fields once the calls are over.
type callStats struct {
	mu        sync.Mutex
	Requests  int   // calls made
	Nodes     int   // Node pages requested
	WireBytes int64 // frame bytes, both directions
}

func (st *callStats) add(requests, nodes int, wire int64) {
	st.mu.Lock()
	st.Requests += requests
	st.Nodes += nodes
	st.WireBytes += wire
	st.mu.Unlock()
}

// call is a unary call with accounting.
func call(ctx context.Context, sess *rpc.Session, st *callStats, m rpc.Method, body []byte) ([]byte, error) {
	o, err := sess.Open(ctx, m, body, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	b, err := o.Reply(ctx)
	in, out := o.WireBytes()
	st.add(1, 0, in+out)
	return b, err
}

// peerRoot asks the peer for its Merkle root under ignore.
func peerRoot(ctx context.Context, sess *rpc.Session, st *callStats, ignore []string) (rootInfo, error) {
	var e rpc.Encoder
	syncwire.AppendIgnore(&e, ignore)
	b, err := call(ctx, sess, st, MethodRoot, e.Bytes())
	if err != nil {
		return rootInfo{}, fmt.Errorf("root: %w", err)
	}
	ri, err := decodeRootInfo(b)
	if err != nil {
		return rootInfo{}, fmt.Errorf("root: %w", err)
	}
	return ri, nil
}

// peerNode asks for one page of the children of the peer's directory at
// path, after the name after.
func peerNode(ctx context.Context, sess *rpc.Session, st *callStats, path, after string, ignore []string) (nodePage, error) {
	req := nodeRequest{Path: path, After: after, Limit: MaxChildren, Ignore: ignore}
	b, err := call(ctx, sess, st, MethodNode, appendNodeRequest(nil, req))
	st.add(0, 1, 0)
	if err != nil {
		return nodePage{}, fmt.Errorf("node /%s: %w", path, err)
	}
	pg, err := decodeNodePage(b, after, req.Limit)
	if err != nil {
		return nodePage{}, fmt.Errorf("node /%s: %w", path, err)
	}
	return pg, nil
}

// peerChildren streams every child of the peer's directory at path to fn,
// page by page, bounded by MaxDirChildren.
func peerChildren(ctx context.Context, sess *rpc.Session, st *callStats, path string, ignore []string, fn func(Child) error) error {
	after, total := "", 0
	for {
		pg, err := peerNode(ctx, sess, st, path, after, ignore)
		if err != nil {
			return err
		}
		total += len(pg.Children)
		if total > MaxDirChildren {
			return fmt.Errorf("node /%s: %w", path, malformed("more than %d children", MaxDirChildren))
		}
		for _, c := range pg.Children {
			if err := fn(c); err != nil {
				return err
			}
		}
		if !pg.More {
			return nil
		}
		after = pg.Children[len(pg.Children)-1].Name
	}
}

// peerRevs returns the peer's change revs of paths.
func peerRevs(ctx context.Context, sess *rpc.Session, st *callStats, paths []string) ([]int64, error) {
	out := make([]int64, 0, len(paths))
	for start := 0; start < len(paths); start += MaxPaths {
		part := paths[start:min(start+MaxPaths, len(paths))]
		b, err := call(ctx, sess, st, MethodRevs, appendPaths(nil, part))
		if err != nil {
			return nil, fmt.Errorf("revs: %w", err)
		}
		revs, err := decodeRevs(b, len(part))
		if err != nil {
			return nil, fmt.Errorf("revs: %w", err)
		}
		out = append(out, revs...)
	}
	return out, nil
}

// peerEntries returns the peer's current entries for paths, in order.
func peerEntries(ctx context.Context, sess *rpc.Session, st *callStats, paths []string) ([]vfs.ChangeEntry, error) {
	out := make([]vfs.ChangeEntry, 0, len(paths))
	for start := 0; start < len(paths); start += MaxPaths {
		part := paths[start:min(start+MaxPaths, len(paths))]
		es, err := peerEntryPage(ctx, sess, st, part)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

func peerEntryPage(ctx context.Context, sess *rpc.Session, st *callStats, paths []string) ([]vfs.ChangeEntry, error) {
	o, err := sess.Open(ctx, MethodEntries, appendPaths(nil, paths), false)
	if err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	defer func() {
		o.Close()
		in, out := o.WireBytes()
		st.add(1, 0, in+out)
	}()
	var es []vfs.ChangeEntry
	var dec syncwire.EntryDecoder
	for {
		p, err := o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if err := dec.Finish(); err != nil {
				return nil, fmt.Errorf("entries: %w", err)
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("entries: %w", err)
		}
		batch, err := dec.Decode(p)
		if err != nil {
			return nil, fmt.Errorf("entries: %w", err)
		}
		for _, e := range batch {
			if len(es) >= len(paths) || e.Path != paths[len(es)] {
				return nil, fmt.Errorf("entries: %w", malformed("entry %d is %q, not the path asked for", len(es), e.Path))
			}
			es = append(es, e)
		}
	}
	if len(es) != len(paths) {
		return nil, fmt.Errorf("entries: %w", malformed("%d entries for %d paths", len(es), len(paths)))
	}
	return es, nil
}
