package converge

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// smallTree is a tree with every kind of node.
func smallTree() []vfs.ChangeEntry {
	es := genEntries(400)
	return append(es,
		vfs.ChangeEntry{Kind: vfs.EntrySymlink, Path: "link", Mode: 0o777, Target: "d000/s0/f000"},
		vfs.ChangeEntry{Kind: vfs.EntryFile, Path: "empty", Mode: 0o600},
		vfs.ChangeEntry{Kind: vfs.EntryDir, Path: "z/y/x", Mode: 0o700},
	)
}

// syncedPair builds the same tree on both sides and marks them synced.
func syncedPair(t *testing.T, es []vfs.ChangeEntry) (*vfs.Store, *vfs.Store) {
	t.Helper()
	server, cont := newStore(t, "server"), newStore(t, "container")
	applyAll(t, server, es)
	applyAll(t, cont, es)
	markSynced(t, server, cont)
	return server, cont
}

func TestEqualTreesOneRoundTrip(t *testing.T) {
	server, cont := syncedPair(t, smallTree())
	r := newRig(t, server, cont)
	rep, err := Verify(context.Background(), server, r.session(t), nil)
	must(t, err)
	if !rep.Converged || rep.LocalRoot != rep.PeerRoot {
		t.Fatalf("converged = %v, roots %s / %s", rep.Converged, rep.LocalRoot, rep.PeerRoot)
	}
	if got, want := rep.Requests, 1; got != want {
		t.Errorf("requests = %d, want %d (one root comparison)", got, want)
	}
	if rep.Nodes != 0 || len(rep.Differences) != 0 {
		t.Errorf("nodes = %d, differences = %v, want none", rep.Nodes, rep.Differences)
	}
	if got, want := rep.LocalNames, len(smallTree())+2; got != want { // z and z/y made as parents
		t.Errorf("local names = %d, want %d", got, want)
	}
}

// A repair of converged trees moves nothing and reports them converged
// after, with their roots (it answered converged false with empty roots).
func TestRepairOfConvergedTreesSaysConverged(t *testing.T) {
	server, cont := syncedPair(t, smallTree())
	r := newRig(t, server, cont)
	rr, err := r.repair(context.Background(), t, server, RepairOptions{})
	must(t, err)
	if !rr.Before.Converged || !rr.After.Converged || rr.After.LocalRoot != rr.Before.LocalRoot || rr.After.PeerRoot != rr.Before.PeerRoot {
		t.Errorf("before %+v\nafter %+v: want converged both, the same roots", rr.Before, rr.After)
	}
	if rr.Pushed+rr.Pulled+rr.Chunks != 0 {
		t.Errorf("moved %d/%d entries, %d chunks: want nothing", rr.Pushed, rr.Pulled, rr.Chunks)
	}
}

func TestRootIsContentAddressed(t *testing.T) {
	// Same tree built in another order, with other mtimes and inode
	// numbers: same root. Any kind, mode or content change: another root.
	es := smallTree()
	a, b := newStore(t, "a"), newStore(t, "b")
	applyAll(t, a, es)
	rev := slices.Clone(es)
	slices.Reverse(rev)
	for i := range rev {
		rev[i].Mtime = 42
	}
	applyAll(t, b, rev)
	if ra, rb := root(t, a, nil), root(t, b, nil); ra != rb {
		t.Fatalf("roots differ: %s / %s", ra, rb)
	}
	before := root(t, a, nil)
	ctx := context.Background()
	must(t, a.ChmodPath(ctx, "z/y/x", 0o755))
	if root(t, a, nil) == before {
		t.Error("a directory mode change left the root unchanged")
	}
}

func TestDriftNamedAndRepaired(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		drift func(t *testing.T, server, cont *vfs.Store)
		want  []string // differing paths
		// peerWins: the container's side is expected to win.
		peerWins bool
	}{
		{"chunk hash in a container manifest", func(t *testing.T, server, cont *vfs.Store) {
			other := chunkstore.AppendManifest(nil, chunkstore.Manifest{ref(contents[1])})
			execRaw(t, cont, `UPDATE nodes SET manifest = ? WHERE ino = ?`, other, inoOf(t, cont, "d000/s1/f004"))
		}, []string{"d000/s1/f004"}, false},
		{"dirent dropped on the container", func(t *testing.T, server, cont *vfs.Store) {
			execRaw(t, cont, `DELETE FROM dirents WHERE parent = ? AND name = 'f002'`, inoOf(t, cont, "d000/s2"))
		}, []string{"d000/s2/f002"}, false},
		{"dirent dropped on the server", func(t *testing.T, server, cont *vfs.Store) {
			execRaw(t, server, `DELETE FROM dirents WHERE parent = ? AND name = 'f003'`, inoOf(t, server, "d000/s3"))
		}, []string{"d000/s3/f003"}, false},
		{"server tombstone lost", func(t *testing.T, server, cont *vfs.Store) {
			must(t, server.RemovePath(ctx, "d000/s0/f001", false))
			execRaw(t, server, `DELETE FROM changes WHERE path = 'd000/s0/f001'`)
			markSynced(t, server, cont) // the push found nothing to send
		}, []string{"d000/s0/f001"}, false},
		{"mode changed on the container", func(t *testing.T, server, cont *vfs.Store) {
			execRaw(t, cont, `UPDATE nodes SET mode = 384 WHERE ino = ?`, inoOf(t, cont, "d000/s0/f003"))
		}, []string{"d000/s0/f003"}, false},
		{"directory mode changed on the container", func(t *testing.T, server, cont *vfs.Store) {
			execRaw(t, cont, `UPDATE nodes SET mode = 448 WHERE ino = ?`, inoOf(t, cont, "d000/s3"))
		}, []string{"d000/s3"}, false},
		{"container wrote after the last fetch", func(t *testing.T, server, cont *vfs.Store) {
			_, err := cont.WriteFile(ctx, "z/new.txt", []byte("written in the container"), 0o640)
			must(t, err)
			must(t, cont.RemovePath(ctx, "link", false))
		}, []string{"link", "z/new.txt"}, true},
		{"container made a subtree after the last fetch", func(t *testing.T, server, cont *vfs.Store) {
			must(t, cont.MkdirPath(ctx, "build/out/obj", 0o755, true))
			for _, p := range []string{"build/a", "build/out/b", "build/out/obj/c"} {
				_, err := cont.WriteFile(ctx, p, []byte("built "+p), 0o644)
				must(t, err)
			}
			must(t, cont.SymlinkPath(ctx, "out/b", "build/link"))
		}, []string{"build"}, true},
		{"kinds swapped on both sides before the last sync", func(t *testing.T, server, cont *vfs.Store) {
			// The container holds a file where the server has a directory
			// (no rev says so): the server's directory wins with its subtree.
			execRaw(t, cont, `DELETE FROM dirents WHERE parent = 1 AND name = 'z'`)
			_, err := cont.WriteFile(ctx, "z", []byte("not a directory"), 0o644)
			must(t, err)
			markSynced(t, server, cont)
		}, []string{"z"}, false},
		{"server wrote after the last push", func(t *testing.T, server, cont *vfs.Store) {
			must(t, server.MkdirPath(ctx, "fresh/deep", 0o755, true))
			_, err := server.WriteFile(ctx, "fresh/deep/a", []byte("server side"), 0o644)
			must(t, err)
		}, []string{"fresh"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, cont := syncedPair(t, smallTree())
			tt.drift(t, server, cont)
			r := newRig(t, server, cont)
			sess := r.session(t)
			rep, err := Verify(ctx, server, sess, nil)
			must(t, err)
			if rep.Converged {
				t.Fatal("verify: converged after drift")
			}
			if got := diffPaths(rep.Differences); !slices.Equal(got, tt.want) {
				t.Fatalf("differences = %q, want %q", got, tt.want)
			}
			rr, err := r.repair(ctx, t, server, RepairOptions{})
			must(t, err)
			if !rr.After.Converged {
				t.Fatalf("after repair: not converged, differences %q", diffPaths(rr.After.Differences))
			}
			if (rr.PeerWins > 0) != tt.peerWins || rr.LocalWins+rr.PeerWins != len(tt.want) {
				t.Errorf("local wins %d, peer wins %d; want peer winning = %v", rr.LocalWins, rr.PeerWins, tt.peerWins)
			}
			if a, b := root(t, server, nil), root(t, cont, nil); a != b {
				t.Errorf("roots differ after repair: %s / %s", a, b)
			}
			// The sync driver takes over without a reset, and moves nothing
			// it would not have moved anyway.
			drv := syncwire.NewDriver(server, peerName, r.client, syncwire.DriverOptions{})
			tr, err := drv.Tick(ctx)
			must(t, err)
			if tr.Pull.Resets+tr.Push.Resets != 0 || tr.Pull.Applied+tr.Push.Applied != 0 {
				t.Errorf("tick after repair: %+v", tr)
			}
			// A second repair finds nothing.
			again, err := r.repair(ctx, t, server, RepairOptions{})
			must(t, err)
			if !again.Before.Converged || again.Before.Requests != 1 {
				t.Errorf("second repair: converged %v in %d requests", again.Before.Converged, again.Before.Requests)
			}
		})
	}
}

func TestHundredThousandFilesOneDrift(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000-file tree")
	}
	ctx := context.Background()
	server, cont := templateStore(t, 100_000, "server"), templateStore(t, 100_000, "container")
	markSynced(t, server, cont)
	execRaw(t, cont, `UPDATE nodes SET mode = 384 WHERE ino = ?`, inoOf(t, cont, "d042/s7/f017"))
	r := newRig(t, server, cont)
	sess := r.session(t)
	rep, err := Verify(ctx, server, sess, nil)
	must(t, err)
	if got, want := diffPaths(rep.Differences), []string{"d042/s7/f017"}; !slices.Equal(got, want) {
		t.Fatalf("differences = %q, want %q", got, want)
	}
	// Depth 3 (root, d042, d042/s7), each directory at most 100 children:
	// one page each. The tree has 100,000 files in 1,100 directories.
	const depth, pagesPerDir = 3, 1
	if rep.Nodes > depth*pagesPerDir || rep.Requests != 1+rep.Nodes {
		t.Errorf("nodes requested = %d, requests = %d; want at most %d nodes", rep.Nodes, rep.Requests, depth*pagesPerDir)
	}
	if rep.LocalNames != 101_100 {
		t.Errorf("local names = %d", rep.LocalNames)
	}
	t.Logf("verify: scan %v, total %v, %d wire bytes", rep.Scan, rep.Duration, rep.WireBytes)
	rr, err := r.repair(ctx, t, server, RepairOptions{})
	must(t, err)
	if !rr.After.Converged || rr.Pushed != 1 {
		t.Fatalf("repair: converged %v after pushing %d entries", rr.After.Converged, rr.Pushed)
	}
}

func TestIgnoredPathsDoNotAffectVerdict(t *testing.T) {
	ctx := context.Background()
	server, cont := syncedPair(t, smallTree())
	must(t, server.MkdirPath(ctx, "node_modules", 0o755, false))
	_, err := server.WriteFile(ctx, "node_modules/a.js", []byte("server deps"), 0o644)
	must(t, err)
	must(t, cont.MkdirPath(ctx, "pkg/node_modules/x", 0o755, true))
	_, err = cont.WriteFile(ctx, "pkg/node_modules/x/b.js", []byte("container deps"), 0o644)
	must(t, err)
	// The directory holding the ignored one must exist on both sides.
	must(t, server.MkdirPath(ctx, "pkg", 0o755, false))
	r := newRig(t, server, cont)
	sess := r.session(t)
	rep, err := Verify(ctx, server, sess, nil) // default: node_modules
	must(t, err)
	if !rep.Converged {
		t.Fatalf("default ignore: diverged on %q", diffPaths(rep.Differences))
	}
	rep, err = Verify(ctx, server, sess, []string{"node_modules", "other"})
	must(t, err)
	if !rep.Converged {
		t.Fatalf("explicit ignore: diverged on %q", diffPaths(rep.Differences))
	}
	rep, err = Verify(ctx, server, sess, []string{})
	must(t, err)
	if got, want := diffPaths(rep.Differences), []string{"node_modules", "pkg/node_modules"}; !slices.Equal(got, want) {
		t.Fatalf("nothing ignored: differences = %q, want %q", got, want)
	}
}

// hostile serves Root and Node from handlers under test.
func hostileRig(t *testing.T, node rpc.Handler) *rig {
	t.Helper()
	cont := newStore(t, "container")
	srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
	srv.Handle(MethodRoot, func(ctx context.Context, c *rpc.Incoming) error {
		return c.Reply(appendRootInfo(nil, rootInfo{Root: Hash{1}, Rev: 1, Names: 1}))
	})
	srv.Handle(MethodNode, node)
	return serveRig(t, nil, cont, srv, nil)
}

func TestHostileResponderRefused(t *testing.T) {
	ctx := context.Background()
	local := newStore(t, "server")
	applyAll(t, local, smallTree())
	tooMany := make([]Child, MaxChildren+1)
	for i := range tooMany {
		tooMany[i] = Child{Name: string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)), Kind: vfs.KindFile}
	}
	slices.SortFunc(tooMany, func(a, b Child) int { return compareNames(a.Name, b.Name) })
	tests := []struct {
		name string
		page []byte
	}{
		{"too many children", appendNodePage(nil, nodePage{Children: tooMany})},
		{"out of order", appendNodePage(nil, nodePage{Children: []Child{{Name: "b", Kind: vfs.KindFile}, {Name: "a", Kind: vfs.KindFile}}})},
		{"duplicate names", appendNodePage(nil, nodePage{Children: []Child{{Name: "a", Kind: vfs.KindFile}, {Name: "a", Kind: vfs.KindDir}}})},
		{"bad name", appendNodePage(nil, nodePage{Children: []Child{{Name: "..", Kind: vfs.KindFile}}})},
		{"bad kind", appendNodePage(nil, nodePage{Children: []Child{{Name: "a", Kind: 9}}})},
		{"garbage", []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3}},
		{"trailing bytes", append(appendNodePage(nil, nodePage{}), 0)},
		{"endless empty pages", appendNodePage(nil, nodePage{More: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hostileRig(t, func(ctx context.Context, c *rpc.Incoming) error { return c.Reply(tt.page) })
			_, err := Verify(ctx, local, r.session(t), nil)
			if !errors.Is(err, rpc.ErrProtocol) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed (EPROTOCOL)", err)
			}
		})
	}
	t.Run("too deep", func(t *testing.T) {
		// A chain deeper than MaxWalkDepth locally, and a peer that claims
		// every level differs.
		deep := newStore(t, "deep")
		p := "d"
		for range MaxWalkDepth + 4 {
			p += "/d"
		}
		must(t, deep.MkdirPath(ctx, p, 0o755, true))
		r := hostileRig(t, func(ctx context.Context, c *rpc.Incoming) error {
			return c.Reply(appendNodePage(nil, nodePage{Children: []Child{{Name: "d", Kind: vfs.KindDir, Mode: 0o755, Hash: Hash{7}}}}))
		})
		_, err := Verify(ctx, deep, r.session(t), nil)
		if !errors.Is(err, rpc.ErrProtocol) {
			t.Fatalf("err = %v, want EPROTOCOL", err)
		}
	})
}

func compareNames(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestResponderValidatesRequests(t *testing.T) {
	ctx := context.Background()
	server, cont := syncedPair(t, smallTree())
	r := newRig(t, server, cont)
	sess := r.session(t)
	var st callStats
	tests := []struct {
		name string
		req  nodeRequest
		want error
	}{
		{"page over the bound", nodeRequest{Path: "", Limit: MaxChildren + 1}, vfs.ErrInvalid},
		{"zero page", nodeRequest{Path: "", Limit: 0}, vfs.ErrInvalid},
		{"dot-dot path", nodeRequest{Path: "../etc", Limit: 10}, rpc.ErrProtocol},
		{"absolute path", nodeRequest{Path: "/etc", Limit: 10}, rpc.ErrProtocol},
		{"missing directory", nodeRequest{Path: "nope", Limit: 10}, vfs.ErrNotExist},
		{"a file, not a directory", nodeRequest{Path: "empty", Limit: 10}, vfs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(ctx, sess, &st, MethodNode, appendNodeRequest(nil, tt.req))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	deep := "a"
	for range MaxWalkDepth {
		deep += "/a"
	}
	if _, err := call(ctx, sess, &st, MethodNode, appendNodeRequest(nil, nodeRequest{Path: deep, Limit: 1})); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("too deep a request: err = %v, want EINVAL", err)
	}
	// Paging: a page of one child at a time walks the whole root.
	var names []string
	after := ""
	for {
		b, err := call(ctx, sess, &st, MethodNode, appendNodeRequest(nil, nodeRequest{After: after, Limit: 1}))
		must(t, err)
		pg, err := decodeNodePage(b, after, 1)
		must(t, err)
		for _, c := range pg.Children {
			names = append(names, c.Name)
		}
		if !pg.More {
			break
		}
		after = pg.Children[0].Name
	}
	if want := []string{"d000", "empty", "link", "z"}; !slices.Equal(names, want) {
		t.Errorf("paged root = %q, want %q", names, want)
	}
}

func TestHostileEntriesRefused(t *testing.T) {
	// A peer that wins a path but answers Entries with another path, or
	// Revs with the wrong count, fails the repair with EPROTOCOL.
	ctx := context.Background()
	for _, tt := range []struct {
		name          string
		revs, entries rpc.Handler
	}{
		{"entries for other paths", nil, func(ctx context.Context, c *rpc.Incoming) error {
			if err := c.ReplyStream(nil); err != nil {
				return err
			}
			b, err := syncwire.AppendEntries(nil, []vfs.ChangeEntry{{Kind: vfs.EntryDir, Path: "elsewhere", Mode: 0o755}})
			must(t, err)
			return c.Send(ctx, b)
		}},
		{"revs of the wrong count", func(ctx context.Context, c *rpc.Incoming) error {
			return c.Reply(appendRevs(nil, []int64{1, 2, 3}))
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server, cont := syncedPair(t, smallTree())
			_, err := cont.WriteFile(ctx, "z/new.txt", []byte("container side"), 0o644)
			must(t, err)
			srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
			resp := &Responder{store: cont, log: slog.New(slog.DiscardHandler)}
			srv.Handle(MethodRoot, resp.root)
			srv.Handle(MethodNode, resp.node)
			srv.Handle(MethodRevs, or(tt.revs, resp.revs))
			srv.Handle(MethodEntries, or(tt.entries, resp.entries))
			r := serveRig(t, server, cont, srv, resp)
			_, err = r.repair(ctx, t, server, RepairOptions{})
			if !errors.Is(err, rpc.ErrProtocol) {
				t.Fatalf("err = %v, want EPROTOCOL", err)
			}
			if _, err := server.Stat(ctx, "z/new.txt"); !errors.Is(err, vfs.ErrNotExist) {
				t.Errorf("server took the hostile answer: %v", err)
			}
		})
	}
}

func or(h, def rpc.Handler) rpc.Handler {
	if h != nil {
		return h
	}
	return def
}

// Repair sends the server's side of a path both sides changed, and the
// container's push fence holds it back: the container's unpulled write
// survives, and the next sync keeps both versions.
func TestRepairNeverOverwritesAnUnpulledContainerChange(t *testing.T) {
	ctx := context.Background()
	server, cont := syncedPair(t, smallTree())
	const p = "d000/s1/f004"
	_, err := server.WriteFile(ctx, p, []byte("server side"), 0o644)
	must(t, err)
	_, err = cont.WriteFile(ctx, p, []byte("written in the container"), 0o644)
	must(t, err)
	r := newRig(t, server, cont)
	if _, err := r.repair(ctx, t, server, RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := cont.ReadFile(ctx, p); err != nil || string(got) != "written in the container" {
		t.Fatalf("the container's %s after repair = %q, %v", p, got, err)
	}
	drv := syncwire.NewDriver(server, peerName, r.client, syncwire.DriverOptions{Conflicts: &vfs.ConflictOptions{}})
	tr, err := drv.Tick(ctx)
	must(t, err)
	if len(tr.Pull.Conflicts) != 1 || tr.Pull.Conflicts[0].Path != p {
		t.Fatalf("tick after repair: conflicts %+v", tr.Pull.Conflicts)
	}
	cp := tr.Pull.Conflicts[0].Copy
	for _, s := range []*vfs.Store{server, cont} {
		a, errA := s.ReadFile(ctx, p)
		b, errB := s.ReadFile(ctx, cp)
		if errA != nil || errB != nil || string(a) != "server side" || string(b) != "written in the container" {
			t.Fatalf("%s = %q (%v), %s = %q (%v): want both versions", p, a, errA, cp, b, errB)
		}
	}
	if a, b := root(t, server, nil), root(t, cont, nil); a != b {
		t.Errorf("roots differ: %s / %s", a, b)
	}
}
