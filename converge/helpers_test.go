package converge

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// peerName is what the server-side store calls the container in these
// tests, as workspace/remote does.
const peerName = "computerd"

func testConfig() rpc.Config {
	return rpc.Config{PingInterval: time.Second, PingTimeout: 10 * time.Second, CallTimeout: time.Minute}
}

func openStore(t testing.TB, path string) *vfs.Store {
	t.Helper()
	s, err := vfs.Open(context.Background(), path, vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t testing.TB, name string) *vfs.Store {
	t.Helper()
	return openStore(t, filepath.Join(t.TempDir(), name+".db"))
}

// rig is a server-side store and a container-side store served over a
// real loopback WebSocket with the convergence methods registered.
type rig struct {
	server, cont *vfs.Store
	resp         *Responder
	client       *rpc.Client
	url          string
}

func newRig(t testing.TB, server, cont *vfs.Store) *rig {
	t.Helper()
	srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
	resp := Register(srv, cont, slog.New(slog.DiscardHandler))
	return serveRig(t, server, cont, srv, resp)
}

func serveRig(t testing.TB, server, cont *vfs.Store, srv *syncwire.Server, resp *Responder) *rig {
	t.Helper()
	url := testutil.WSServer(t, srv, "/sync")
	cfg := testConfig()
	if server != nil {
		cfg.ID = server.ID()
	} else {
		cfg.ID = "server"
	}
	c := rpc.NewClient(rpc.ClientOptions{Config: cfg, URL: url})
	t.Cleanup(func() { c.Close() })
	return &rig{server: server, cont: cont, resp: resp, client: c, url: url}
}

// repair runs Repair of local against the rig's container in a driver's
// exchange, as workspace/remote does.
func (r *rig) repair(ctx context.Context, t testing.TB, local *vfs.Store, opts RepairOptions) (RepairReport, error) {
	t.Helper()
	cfg := testConfig()
	cfg.ID = local.ID()
	c := rpc.NewClient(rpc.ClientOptions{Config: cfg, URL: r.url})
	t.Cleanup(func() { c.Close() })
	var rr RepairReport
	err := syncwire.NewDriver(local, peerName, c, syncwire.DriverOptions{}).Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		rr, err = Repair(ctx, local, x, opts)
		return err
	})
	return rr, err
}

func (r *rig) session(t testing.TB) *rpc.Session {
	t.Helper()
	s, _, err := r.client.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// markSynced records both sides' watermarks as a clean sync would leave
// them: the server pushed and fetched everything (and the container
// served its feed through its current rev).
func markSynced(t testing.TB, server, cont *vfs.Store) {
	t.Helper()
	ctx := context.Background()
	cont.NoteServed(ctx, cont.CurrentRev())
	must(t, server.SetWatermarks(ctx, peerName, watermark.Set{Push: watermark.At(server.CurrentRev()), Fetch: watermark.At(cont.CurrentRev())}))
	at := watermark.At(server.CurrentRev())
	must(t, cont.SetWatermarks(ctx, server.ID(), watermark.Set{Fetch: at, AppliedPush: at}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// contents are the tiny chunks generated trees share.
var contents = [][]byte{[]byte("alpha content 01"), []byte("bravo content 02"), []byte("charlie content3"), []byte("delta content 04")}

func ref(b []byte) chunkstore.Ref {
	return chunkstore.Ref{Hash: chunkstore.Sum(b), Size: uint32(len(b))}
}

// genEntries returns the entries of a generated tree of about n files:
// top/sub/file, fan-out top x 10 x per.
func genEntries(n int) []vfs.ChangeEntry {
	per := 100
	subs := 10
	tops := max(1, n/(per*subs))
	var es []vfs.ChangeEntry
	i := 0
	for a := range tops {
		es = append(es, vfs.ChangeEntry{Kind: vfs.EntryDir, Path: fmt.Sprintf("d%03d", a), Mode: 0o755})
		for b := range subs {
			es = append(es, vfs.ChangeEntry{Kind: vfs.EntryDir, Path: fmt.Sprintf("d%03d/s%d", a, b), Mode: 0o755})
			for f := range per {
				c := contents[i%len(contents)]
				es = append(es, vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("d%03d/s%d/f%03d", a, b, f), Mode: 0o644,
					Mtime: 1_700_000_000_000_000_000, Size: int64(len(c)), Chunks: chunkstore.Manifest{ref(c)}})
				i++
				if i >= n {
					return es
				}
			}
		}
	}
	return es
}

// applyAll applies entries in 256-entry batches, staging the shared chunks.
func applyAll(t testing.TB, s *vfs.Store, es []vfs.ChangeEntry) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < len(es); start += 256 {
		st := s.Chunks().NewStage()
		for _, c := range contents {
			must(t, st.Put(ctx, chunkstore.Sum(c), c))
		}
		_, err := s.Apply(ctx, es[start:min(start+256, len(es))], vfs.ApplyOptions{Source: vfs.Local, Stage: st})
		st.Release()
		must(t, err)
	}
}

var (
	templates    sync.Map // n -> path of a closed store file holding genEntries(n)
	templateDirs sync.Map // directories to remove when the tests are done
)

func TestMain(m *testing.M) {
	code := m.Run()
	templateDirs.Range(func(k, _ any) bool { os.RemoveAll(k.(string)); return true })
	os.Exit(code)
}

// templateStore returns a fresh copy of a store holding genEntries(n), built
// once per test binary, with a store id of its own.
func templateStore(t testing.TB, n int, name string) *vfs.Store {
	t.Helper()
	v, _ := templates.LoadOrStore(n, sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "converge-template")
		if err != nil {
			return "", err
		}
		templateDirs.Store(dir, true)
		p := filepath.Join(dir, "t.db")
		s, err := vfs.Open(context.Background(), p, vfs.Options{NoSync: true})
		if err != nil {
			return "", err
		}
		applyAll(t, s, genEntries(n))
		return p, s.Close()
	}))
	src, err := v.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name+".db")
	copyFile(t, src, dst)
	db := rawDB(t, dst)
	_, err = db.Exec(`UPDATE meta SET value = ? WHERE key = 'store_id'`, uuid.NewString())
	must(t, err)
	must(t, db.Close())
	return openStore(t, dst)
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	must(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

// rawDB opens a store's database file directly, to inject drift no rev
// describes.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	must(t, err)
	db.SetMaxOpenConns(1)
	return db
}

func execRaw(t testing.TB, s *vfs.Store, q string, args ...any) {
	t.Helper()
	db := rawDB(t, s.Path())
	defer db.Close()
	res, err := db.Exec(q, args...)
	must(t, err)
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s: no row changed", q)
	}
}

// inoOf resolves a path's inode.
func inoOf(t testing.TB, s *vfs.Store, p string) vfs.Ino {
	t.Helper()
	ino, err := s.ResolvePath(context.Background(), p)
	must(t, err)
	return ino
}

// root returns a store's Merkle root under ignore.
func root(t testing.TB, s *vfs.Store, ignore []string) Hash {
	t.Helper()
	tr, err := BuildTree(context.Background(), s, vfs.NewIgnore(ignore))
	must(t, err)
	return tr.Root
}

func diffPaths(ds []Difference) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Path
	}
	return out
}
