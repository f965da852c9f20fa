package tests

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
)

// clusterPair is a separate computerd, a real S3-compatible server and two
// workspace-servers (A and B) sharing it, each with its own data directory.
type clusterPair struct {
	a, b *pair
	s3   *s3test.Server
}

const clusterTTL = "2s"

func newClusterPair(t testing.TB) *clusterPair {
	t.Helper()
	return newClusterPairTTL(t, clusterTTL)
}

// newClusterPairTTL is newClusterPair with another lease TTL.
func newClusterPairTTL(t testing.TB, ttl string) *clusterPair {
	t.Helper()
	s3 := s3test.Start(t)
	s3.Env(t) // the servers inherit the credentials
	a := projPair(t, append(sharedArgs(s3)[:2:2], "--lease-ttl", ttl, "--replicate-every", "200ms"))
	return &clusterPair{a: a, b: a.peer("data-b"), s3: s3}
}

// sharedArgs are serve's flags for a server sharing its workspaces through
// s3.
func sharedArgs(s3 *s3test.Server) []string {
	return []string{"--object-store", s3.URL("cluster"), "--lease-ttl", clusterTTL, "--replicate-every", "200ms"}
}

// projPair is a pair (a separate computerd on disk) serving workspace
// proj, which it creates; args are serve's extra flags, nil for this
// server's disk alone.
func projPair(t testing.TB, args []string) *pair {
	t.Helper()
	p := newPair(t, pairOpts{separate: "disk", serverArgs: args})
	p.ok("workspaces", "create", "proj", "--computerd", "ws://"+p.cdAddr+"/sync", "--computerd-token-file", p.tokenFile(), "--ignore", "")
	p.env = append(p.env, "WSYNC_WORKSPACE=proj")
	return p
}

// peer starts another server beside a's, with the same token, flags and
// computerd and a data directory of its own (named data), working on proj.
func (a *pair) peer(data string) *pair {
	a.t.Helper()
	p := &pair{t: a.t, dir: a.dir, token: a.token, mount: a.mount, data: filepath.Join(a.t.TempDir(), data),
		cd: a.cd, cdAddr: a.cdAddr, cdState: a.cdState, serverArgs: a.serverArgs,
		env: []string{"WSYNC_TOKEN_FILE=" + a.tokenFile(), "WSYNC_WORKSPACE=proj"}}
	p.startServer()
	return p
}

// ownership is status --json's view of a workspace's owner and replica.
type ownership struct {
	Ownership *struct {
		Owner      string  `json:"owner"`
		Address    string  `json:"address"`
		Generation int64   `json:"generation"`
		Lag        float64 `json:"replication_lag_seconds"`
		Owed       int64   `json:"owed_chunk_uploads"`
		Err        string  `json:"replication_error"`
	} `json:"ownership"`
	LastPull *struct {
		Report struct {
			Entries int `json:"entries"`
		} `json:"report"`
	} `json:"last_pull"`
}

func (p *pair) ownership(ws string) ownership {
	p.t.Helper()
	var o ownership
	out := p.ok("status", "--json")
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		p.t.Fatalf("status --json: %v\n%s", err, out)
	}
	return o
}

// caughtUp waits until the object store has everything the owner
// committed: lag 0 and no chunk upload owed.
func (p *pair) caughtUp(ws string) {
	p.t.Helper()
	testutil.WaitFor(p.t, "replication of "+ws+" to catch up", 30*time.Second, func() bool {
		o := p.ownership(ws)
		return o.Ownership != nil && o.Ownership.Lag == 0 && o.Ownership.Owed == 0 && o.Ownership.Err == ""
	})
}

// TestTakeoverAfterSIGKILL: a workspace filled on server A (through the
// API and by a command in the container) is served by server B within the
// lease time after A is SIGKILLed: every file and every acknowledged sync,
// and computerd catches up incrementally (the next pull moves only what is
// new).
func TestTakeoverAfterSIGKILL(t *testing.T) {
	c := newClusterPair(t)
	a, b := c.a, c.b
	big := strings.Repeat("0123456789abcdef", 80<<10) // 1.25 MiB: three chunks, in the bucket
	if r := a.cli(big, "write", "/big.bin", "-"); r.code != 0 {
		t.Fatalf("write: %s", r.stderr)
	}
	if r := a.cli("from the api\n", "write", "/a.txt", "-"); r.code != 0 {
		t.Fatalf("write: %s", r.stderr)
	}
	a.ok("exec", "--", "sh", "-c", "mkdir -p gen && for i in $(seq 1 200); do echo file $i > gen/f$i.txt; done; head -c 700000 /dev/urandom > gen/rand.bin")
	if got := a.ok("read", "/gen/f7.txt"); got != "file 7\n" {
		t.Fatalf("A serves f7 as %q", got)
	}
	rand := a.ok("read", "/gen/rand.bin")
	a.caughtUp("proj")
	if o := a.ownership("proj"); o.Ownership.Generation != 1 {
		t.Fatalf("A's generation %d", o.Ownership.Generation)
	}

	// While A lives, B sends callers to A.
	r := b.cli("", "read", "/a.txt")
	if r.code != 0 || r.stdout != "from the api\n" {
		t.Fatalf("B while A owns proj: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	a.server.kill()
	start := time.Now()
	testutil.WaitFor(t, "B to take proj over", 30*time.Second, func() bool {
		return b.serves("proj")
	})
	took := time.Since(start)
	t.Logf("B served proj %v after A's SIGKILL (lease ttl %s)", took.Round(time.Millisecond), clusterTTL)
	if ttl, _ := time.ParseDuration(clusterTTL); took > ttl+5*time.Second {
		t.Errorf("takeover took %v, lease %v", took, ttl)
	}
	if got := b.ok("read", "/big.bin"); got != big {
		t.Fatalf("B's /big.bin: %d bytes, want %d", len(got), len(big))
	}
	if got := b.ok("read", "/gen/rand.bin"); got != rand {
		t.Fatal("B's /gen/rand.bin differs from what A served")
	}
	for _, i := range []int{1, 100, 200} {
		if got := b.ok("read", fmt.Sprintf("/gen/f%d.txt", i)); got != fmt.Sprintf("file %d\n", i) {
			t.Fatalf("B's f%d: %q", i, got)
		}
	}
	o := b.ownership("proj")
	if o.Ownership == nil || o.Ownership.Generation != 2 || o.Ownership.Address != b.url {
		t.Fatalf("B's ownership: %+v", o.Ownership)
	}
	// computerd catches up incrementally: the pull after B's first command
	// moves the command's one file, not the workspace.
	b.ok("exec", "--", "sh", "-c", "echo after > after.txt")
	if got := b.ok("read", "/after.txt"); got != "after\n" {
		t.Fatalf("after.txt through B: %q", got)
	}
	if o := b.ownership("proj"); o.LastPull == nil || o.LastPull.Report.Entries > 5 {
		t.Fatalf("B's first pull after the takeover: %+v (want a handful of entries)", o.LastPull)
	}
	// A file B writes reaches the container.
	if r := b.cli("from b\n", "write", "/b.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if got := b.sh("cat b.txt a.txt"); got != "from b\nfrom the api\n" {
		t.Fatalf("the container after B's write: %q", got)
	}
}

// TestPausedOwnerIsFenced: server A, SIGSTOPped past its lease while B
// takes the workspace over, finds it lost when it runs again: it sends
// callers to B, writes nothing more to the bucket (its generation's replica
// and the registration stay as they were) and pushes nothing to the
// container; a third server restoring from the bucket gets B's state.
func TestPausedOwnerIsFenced(t *testing.T) {
	c := newClusterPair(t)
	a, b := c.a, c.b
	if r := a.cli("one\n", "write", "/x.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	a.ok("exec", "--", "true")
	a.caughtUp("proj")
	// A commit A has not shipped yet when it stops (most runs): its
	// replicator wants to ship it when A runs again.
	if r := a.cli("pending\n", "write", "/y.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	// And chunks it has not uploaded yet (most runs): it must not upload
	// them once it runs again without its lease.
	if r := a.cli(strings.Repeat("unshipped", 40<<10), "write", "/z.bin", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	a.server.cmd.Process.Signal(syscall.SIGSTOP)
	testutil.WaitFor(t, "B to take proj over from the paused A", 30*time.Second, func() bool {
		return b.serves("proj")
	})
	if r := b.cli("two\n", "write", "/x.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	b.ok("exec", "--", "true") // pushes two to the container
	b.caughtUp("proj")
	before := c.objects(t, "cluster/workspaces/proj/db/gen-0000000000000001/")
	chunksBefore := c.chunkObjects(t)
	a.server.cmd.Process.Signal(syscall.SIGCONT)
	testutil.WaitFor(t, "A to find its lease lost", 30*time.Second, func() bool {
		return strings.Contains(a.server.output(), "workspace lease lost")
	})
	// A sends proj's callers to B, the owner, without serving them.
	status, _, hdr := rawGet(t, a, "/v1/workspaces/proj/files/x.txt")
	if status != 307 || hdr.Get("Location") != b.url+"/v1/workspaces/proj/files/x.txt" {
		t.Fatalf("A's answer for proj: %d, Location %q", status, hdr.Get("Location"))
	}
	if after := c.objects(t, "cluster/workspaces/proj/db/gen-0000000000000001/"); !maps.Equal(before, after) {
		t.Fatalf("the fenced A changed its generation's replica:\nbefore %v\nafter  %v", before, after)
	}
	if after := c.chunkObjects(t); !maps.Equal(chunksBefore, after) {
		t.Fatalf("the fenced A wrote chunks:\nbefore %v\nafter  %v", chunksBefore, after)
	}
	if got := b.sh("cat x.txt"); got != "two\n" {
		t.Fatalf("the container's x.txt: %q", got)
	}
	if o := b.ownership("proj"); o.Ownership == nil || o.Ownership.Generation != 2 {
		t.Fatalf("B's ownership after A came back: %+v", o.Ownership)
	}
	// A third server restoring from the bucket gets B's state.
	b.caughtUp("proj")
	cc := a.peer("data-c")
	b.server.kill()
	testutil.WaitFor(t, "C to take proj over from B", 30*time.Second, func() bool {
		return cc.serves("proj")
	})
	if got := cc.ok("read", "/x.txt"); got != "two\n" {
		t.Fatalf("C restored x.txt as %q", got)
	}
}

// objects lists the bucket's objects under prefix (a path below the
// bucket), key to ETag, straight from the server's directory.
func (c *clusterPair) objects(t *testing.T, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join(c.s3.Root, c.s3.Bucket)
	filepath.WalkDir(filepath.Join(root, prefix), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, _ := d.Info()
			rel, _ := filepath.Rel(root, p)
			out[rel] = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	})
	return out
}

// serves is true when the server answers a status of the workspace
// itself (not a redirect to its owner, which may hang when paused).
func (p *pair) serves(ws string) bool {
	status, _, _ := rawGet(p.t, p, "/v1/workspaces/"+ws+"/status")
	return status == http.StatusOK
}

// rawGet is one API request that does not follow redirects; a transport
// failure is status 0.
func rawGet(t testing.TB, p *pair, path string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", p.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// chunkObjects lists the bucket's chunk objects (key to size) under the
// cluster prefix, straight from the server's directory.
func (c *clusterPair) chunkObjects(t *testing.T) map[string]string {
	t.Helper()
	return c.objects(t, "cluster/chunks/")
}

// TestIdenticalContentStoredOnce: two workspaces holding the same files
// (and one workspace holding a file twice) store each chunk once in the
// bucket.
func TestIdenticalContentStoredOnce(t *testing.T) {
	c := newClusterPair(t)
	a := c.a
	a.ok("workspaces", "create", "other", "--ignore", "")
	big := strings.Repeat("fedcba9876543210", 80<<10) // 1.25 MiB: chunks of 512, 512 and 256 KiB
	for _, ws := range []string{"proj", "other"} {
		for _, name := range []string{"/one.bin", "/copy.bin"} {
			if r := a.cli(big, "write", "--workspace", ws, name, "-"); r.code != 0 {
				t.Fatalf("write %s%s: %s", ws, name, r.stderr)
			}
		}
	}
	a.caughtUpWorkspace("proj")
	a.caughtUpWorkspace("other")
	objs := c.chunkObjects(t)
	if len(objs) != 2 { // the two 512 KiB chunks are the same bytes
		t.Fatalf("the bucket holds %d chunk objects for one file's 2 distinct chunks written 4 times: %v", len(objs), objs)
	}
	if got := a.ok("read", "--workspace", "other", "/copy.bin"); got != big {
		t.Fatalf("other's copy.bin: %d bytes", len(got))
	}
}

// caughtUpWorkspace is caughtUp for a workspace other than the pair's own.
func (p *pair) caughtUpWorkspace(ws string) {
	p.t.Helper()
	testutil.WaitFor(p.t, "replication of "+ws+" to catch up", 30*time.Second, func() bool {
		var o ownership
		r := p.cli("", "status", "--workspace", ws, "--json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &o) != nil {
			return false
		}
		return o.Ownership != nil && o.Ownership.Lag == 0 && o.Ownership.Owed == 0 && o.Ownership.Err == ""
	})
}

// TestObjectStoreOutage: while the object store is down, the workspace
// keeps working on its server (files written, commands run and synced)
// and status shows the replication falling behind; an outage longer than
// the lease stops the server from serving the workspace (it cannot prove
// it still owns it) with a clear error; when the store is back the server
// takes the workspace back with its local store, replication catches up,
// and a takeover afterwards finds every write made before the outage and
// during it.
func TestObjectStoreOutage(t *testing.T) {
	// A lease that outlives the writes and the status checks made while
	// the bucket is down, however loaded the machine.
	c := newClusterPairTTL(t, "6s")
	a, b := c.a, c.b
	if r := a.cli("before\n", "write", "/before.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	big := strings.Repeat("outage--", 90<<10) // 720 KiB: two chunks, uploaded after the outage
	a.ok("exec", "--", "true")
	a.caughtUp("proj")

	c.s3.Stop()
	if r := a.cli("during\n", "write", "/during.txt", "-"); r.code != 0 {
		t.Fatalf("a write while the object store is down: %s", r.stderr)
	}
	if r := a.cli(big, "write", "/big.bin", "-"); r.code != 0 {
		t.Fatalf("a write while the object store is down: %s", r.stderr)
	}
	if got := a.sh("cat during.txt; echo made > made.txt"); got != "during\n" {
		t.Fatalf("the container during the outage: %q", got)
	}
	testutil.WaitFor(t, "status to show the replication behind", 30*time.Second, func() bool {
		o := a.ownership("proj")
		return o.Ownership != nil && o.Ownership.Lag > 0 && o.Ownership.Err != "" && o.Ownership.Owed > 0
	})

	// Past the lease: A can no longer prove it owns proj, so it stops
	// serving it (another server may take it over once the store is back)
	// and says why, rather than accept writes it may not keep.
	testutil.WaitFor(t, "A to find its lease lost", 30*time.Second, func() bool {
		return strings.Contains(a.server.output(), "workspace lease lost")
	})
	if r := a.cli("refused\n", "write", "/refused.txt", "-"); r.code == 0 || !strings.Contains(r.stderr, "object store unavailable") {
		t.Fatalf("A's answer for a workspace whose lease it lost, the object store down: exit %d: %s", r.code, r.stderr)
	}

	c.s3.Restart()
	// A takes proj back and keeps its local store: nothing written during
	// the outage is lost.
	if got := a.ok("read", "/during.txt"); got != "during\n" {
		t.Fatalf("A's during.txt after the outage: %q", got)
	}
	a.caughtUp("proj")
	a.server.kill()
	testutil.WaitFor(t, "B to take proj over", 30*time.Second, func() bool { return b.serves("proj") })
	for path, want := range map[string]string{"/before.txt": "before\n", "/during.txt": "during\n", "/made.txt": "made\n", "/big.bin": big} {
		if got := b.ok("read", path); got != want {
			t.Errorf("B's %s: %d bytes, want %d", path, len(got), len(want))
		}
	}
}

// TestTakeoverPullsTheLagWindowBack: a command's output pulled by A in the
// last moments before A dies, never shipped to the object store (it hangs
// meanwhile), is missing from the copy B restores; B pulls it back from the
// container at once when it claims the workspace, without waiting for the
// next command.
func TestTakeoverPullsTheLagWindowBack(t *testing.T) {
	// A lease that outlives the commands A runs while the bucket hangs
	// (its renewals hang with it), however loaded the machine.
	c := newClusterPairTTL(t, "6s")
	a, b := c.a, c.b
	a.ok("exec", "--", "sh", "-c", "echo early > early.txt")
	a.caughtUp("proj")

	c.s3.Pause() // nothing A commits from now on reaches the bucket
	// A file written through A's API, which A's next exec pushes to the
	// container: B's restored store lacks it, and must get it back from
	// the container (whose bounce run would keep it out of B's pulls).
	if r := a.cli("api, late\n", "write", "/api-late.txt", "-"); r.code != 0 {
		t.Fatalf("A's write: exit %d %s", r.code, r.stderr)
	}
	if got := a.sh("echo late > late.txt; cat early.txt api-late.txt"); got != "early\napi, late\n" {
		t.Fatalf("A's exec: %q", got)
	}
	if got := a.ok("read", "/late.txt"); got != "late\n" {
		t.Fatalf("A's late.txt: %q", got)
	}
	a.server.kill()
	c.s3.Resume()

	testutil.WaitFor(t, "B to take proj over", 30*time.Second, func() bool { return b.serves("proj") })
	testutil.WaitFor(t, "B to pull late.txt back from the container", 30*time.Second, func() bool {
		r := b.cli("", "read", "/late.txt")
		return r.code == 0 && r.stdout == "late\n"
	})
	if got := b.ok("read", "/early.txt"); got != "early\n" {
		t.Fatalf("B's early.txt: %q", got)
	}
	testutil.WaitFor(t, "B to pull api-late.txt back from the container", 30*time.Second, func() bool {
		r := b.cli("", "read", "/api-late.txt")
		return r.code == 0 && r.stdout == "api, late\n"
	})
}

// TestTakeoverDuringUploads: A is SIGKILLed while it is still uploading
// the chunks of a command's output (the bucket behind by hundreds of
// chunks). Whatever replica B restores names only chunks the bucket has,
// and B's catch-up pull brings the rest from the container: every file
// reads back whole through B.
func TestTakeoverDuringUploads(t *testing.T) {
	c := newClusterPairTTL(t, "3s")
	a, b := c.a, c.b
	// 300 files of 100 KiB of distinct bytes: 300 chunks to upload, each
	// asked about first.
	a.ok("exec", "--", "sh", "-c", "mkdir -p out && for i in $(seq 1 300); do head -c 102400 /dev/urandom > out/f$i; done")
	sums := a.sh("cd out && sha256sum f*")
	if o := a.ownership("proj"); o.Ownership == nil || o.Ownership.Owed == 0 && o.Ownership.Lag == 0 {
		t.Logf("A caught up before the kill (a fast machine): %+v", o.Ownership)
	}
	a.server.kill()
	testutil.WaitFor(t, "B to take proj over", 30*time.Second, func() bool { return b.serves("proj") })
	testutil.WaitFor(t, "B to serve every file of out/", 60*time.Second, func() bool {
		r := b.cli("", "ls", "/out")
		return r.code == 0 && strings.Count(r.stdout, "\n") >= 300
	})
	if o := b.ownership("proj"); o.LastPull != nil {
		t.Logf("B's catch-up pull brought %d entries back from the container", o.LastPull.Report.Entries)
	}
	lines := strings.Split(strings.TrimSpace(sums), "\n")
	if len(lines) != 300 {
		t.Fatalf("the container's sums: %d lines", len(lines))
	}
	ws := b.proj()
	for _, line := range lines {
		sum, name, _ := strings.Cut(line, "  ")
		got, err := ws.ReadFile(t.Context(), "/out/"+name)
		if err != nil {
			t.Fatalf("B's out/%s: %v", name, err)
		}
		if s := fmt.Sprintf("%x", sha256.Sum256(got)); s != sum {
			t.Errorf("B's out/%s: %d bytes, sha256 %s, want %s", name, len(got), s, sum)
		}
	}
	b.caughtUp("proj")
}

// TestRestoredReadWhileTheBucketIsDown: a server that took a workspace over
// reads chunk bytes from the bucket on first use; while the bucket is down
// such a read fails with a 503 that says so (callers retry), and succeeds
// once it is back.
func TestRestoredReadWhileTheBucketIsDown(t *testing.T) {
	c := newClusterPairTTL(t, "6s")
	a, b := c.a, c.b
	big := strings.Repeat("read me later ", 60<<10) // 840 KiB: two chunks, only in the bucket for B
	if r := a.cli(big, "write", "/big.txt", "-"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	a.caughtUp("proj")
	a.server.kill()
	testutil.WaitFor(t, "B to take proj over", 30*time.Second, func() bool { return b.serves("proj") })

	c.s3.Stop()
	status, body, hdr := rawGet(t, b, "/v1/workspaces/proj/files/big.txt")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "EOBJECT_STORE") || hdr.Get("Retry-After") == "" {
		t.Fatalf("B's read with the bucket down: %d %s (Retry-After %q)", status, body, hdr.Get("Retry-After"))
	}
	c.s3.Restart()
	if got := b.ok("read", "/big.txt"); got != big {
		t.Fatalf("B's big.txt once the bucket is back: %d bytes", len(got))
	}
}
