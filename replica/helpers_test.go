package replica

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/vfs"
)

// bucket starts a real S3 server and opens the store of a prefix in it.
func bucket(t testing.TB) (*s3test.Server, *objstore.Store) {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	// litestream's S3 client refuses AWS_CA_BUNDLE (caBundleHint); the
	// test server is plain HTTP on loopback.
	t.Setenv("AWS_CA_BUNDLE", "")
	return srv, openBucket(t, srv.URL("root"))
}

func openBucket(t testing.TB, u string) *objstore.Store {
	t.Helper()
	cfg, err := objstore.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openVFS opens a workspace store whose checkpoints litestream owns.
func openVFS(t testing.TB, path string) *vfs.Store {
	t.Helper()
	s, err := vfs.Open(context.Background(), path, vfs.Options{NoSync: true, ExternalCheckpoint: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// gateOf is the server's gate without chunks: hold the store's writer.
func gateOf(s *vfs.Store) func(context.Context, func(context.Context) error) error {
	return func(ctx context.Context, ship func(context.Context) error) error {
		return s.Exclusive(ctx, ship)
	}
}

// start starts a replicator, closed at cleanup.
func start(t testing.TB, o Options) *Replicator {
	t.Helper()
	if o.Interval == 0 {
		o.Interval = 50 * time.Millisecond
	}
	r, err := Start(testutil.Context(t, 30*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func writeFiles(t testing.TB, s *vfs.Store, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := s.WriteFile(context.Background(), fileName(i), fileData(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fileName(i int) string { return fmt.Sprintf("f%05d", i) }
func fileData(i int) []byte { return []byte(strings.Repeat(fmt.Sprintf("file %d;", i), 1+i%50)) }

// checkFiles opens the database at path with vfs and reads files
// [0, n) back; more reports whether a file past n exists.
func checkFiles(t testing.TB, path string, n int) (more bool) {
	t.Helper()
	s, err := vfs.Open(context.Background(), path, vfs.Options{NoSync: true})
	if err != nil {
		t.Fatalf("open the restored store: %v", err)
	}
	defer s.Close()
	for i := range n {
		b, err := s.ReadFile(context.Background(), fileName(i))
		if err != nil {
			t.Fatalf("restored %s: %v", fileName(i), err)
		}
		if string(b) != string(fileData(i)) {
			t.Fatalf("restored %s: %q, want %q", fileName(i), b, fileData(i))
		}
	}
	_, err = s.Stat(context.Background(), fileName(n))
	return err == nil
}

// dump is every row of every table of the database at path but
// litestream's own, sorted: two databases with equal dumps hold the
// same data.
func dump(t testing.TB, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_litestream_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	var out []string
	for _, tb := range tables {
		rows, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %v", tb, vals))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	slices.Sort(out)
	return out
}

// keys lists the keys under prefix.
func keys(t testing.TB, st *objstore.Store, prefix string) []string {
	t.Helper()
	var out []string
	for o, err := range st.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Key)
	}
	return out
}

func restore(t testing.TB, st *objstore.Store, prefix string, upTo int64) (string, int64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "restored.db")
	g, err := Restore(testutil.Context(t, 60*time.Second), st, prefix, upTo, p)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return p, g
}

// openProbeForTest returns a function reading the committed rev of the
// database at path on a connection of its own.
func openProbeForTest(t testing.TB, path string) func() int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=query_only(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return func() int64 {
		var rev int64
		if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'rev'`).Scan(&rev); err != nil {
			t.Error(err)
		}
		return rev
	}
}

// revOf is the committed rev of the database at path.
func revOf(t testing.TB, path string) int64 {
	t.Helper()
	return openProbeForTest(t, path)()
}
