package converge

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// repeatedFile writes a file of n refs of one full chunk (and a short
// last one): a manifest of n refs that costs one chunk of storage.
func repeatedFile(t testing.TB, s *vfs.Store, path string, n int) vfs.ChangeEntry {
	t.Helper()
	ctx := context.Background()
	full := bytes.Repeat([]byte{7}, chunkstore.ChunkSize)
	tail := []byte("the end")
	m := make(chunkstore.Manifest, 0, n+1)
	for range n {
		m = append(m, chunkstore.Ref{Hash: chunkstore.Sum(full), Size: chunkstore.ChunkSize})
	}
	m = append(m, ref(tail))
	e := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: path, Mode: 0o644, Mtime: 1_700_000_000_000_000_000, Chunks: m, Size: m.Size()}
	st := s.Chunks().NewStage()
	defer st.Release()
	must(t, st.Put(ctx, chunkstore.Sum(full), full))
	must(t, st.Put(ctx, chunkstore.Sum(tail), tail))
	_, err := s.Apply(ctx, []vfs.ChangeEntry{e}, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
	must(t, err)
	return e
}

// TestSnapshotStreamsLargeManifest: a file whose manifest is larger than a
// page (with WSYNC_LONG=1: 120,001 refs, 4.2 MB encoded, over MaxPageRaw)
// was refused; it now travels as a head and continuation records over
// several pages and installs whole. In CI the file has 3,001 refs in
// records of 256 (applying a manifest of many refs costs about 1.5 ms a
// ref in the store, twice).
func TestSnapshotStreamsLargeManifest(t *testing.T) {
	ctx := context.Background()
	refs, partRefs := 3_000, 256
	if os.Getenv("WSYNC_LONG") != "" {
		refs, partRefs = 120_000, maxPartRefs
	}
	server := newStore(t, "server")
	applyAll(t, server, smallTree())
	e := repeatedFile(t, server, "d000/big", refs)
	cont := newStore(t, "container")
	r := newRig(t, server, cont)
	rep, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName, partRefs: partRefs})
	must(t, err)
	if want := len(smallTree()) + 2 + recordCount(len(e.Chunks), partRefs); rep.Total != want {
		t.Errorf("records = %d, want %d", rep.Total, want)
	}
	assertSameRoot(t, server, cont, "roots after bootstrap")
	es, err := cont.EntriesAt(ctx, []string{"d000/big"})
	must(t, err)
	if es[0].Size != e.Size || len(es[0].Chunks) != len(e.Chunks) {
		t.Errorf("installed size %d in %d refs, want %d in %d", es[0].Size, len(es[0].Chunks), e.Size, len(e.Chunks))
	}
	t.Logf("bootstrap: %d records in %d pages, %d raw -> %d compressed bytes, %v", rep.Total, rep.Pages, rep.RawBytes, rep.PageBytes, rep.Duration)
}

// TestSnapshotResumesInsideASplitFile: a bootstrap cut while a split
// file's parts are half staged resumes at the next part.
func TestSnapshotResumesInsideASplitFile(t *testing.T) {
	server := newStore(t, "server")
	applyAll(t, server, genEntries(50))
	repeatedFile(t, server, "d000/big", 2_000)
	repeatedFile(t, server, "d000/s0/later", 300)
	cont := newStore(t, "container")
	r := newRig(t, server, cont)
	ctx, cancel := context.WithCancel(context.Background())
	opts := BootstrapOptions{Peer: peerName, pageBytes: 4 << 10, partRefs: 64}
	var cutAt int
	opts.Progress = func(rep BootstrapReport) {
		// d000 and its big file come first in the walk.
		if staged := rep.Staged(); staged > 5 && cutAt == 0 {
			cutAt = staged
			cancel()
		}
	}
	_, err := Bootstrap(ctx, server, r.session(t), opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted bootstrap: err = %v", err)
	}
	assertEmpty(t, cont)
	r = newRig(t, server, cont)
	opts.Progress = nil
	rep, err := Bootstrap(context.Background(), server, r.session(t), opts)
	must(t, err)
	if rep.ResumedAt != cutAt || rep.ResumedAt+rep.Sent != rep.Total {
		t.Fatalf("resumed at %d (cut at %d), sent %d of %d", rep.ResumedAt, cutAt, rep.Sent, rep.Total)
	}
	assertSameRoot(t, server, cont, "roots after resumed bootstrap")
}

// TestSnapshotSplitFileOutOfRunRefused: parts of a split file that do not
// follow their head, or stop short of its count, fail the commit as
// malformed and leave the live store untouched.
func TestSnapshotSplitFileOutOfRunRefused(t *testing.T) {
	ctx := context.Background()
	c := []byte("split content")
	h := chunkstore.Sum(c)
	full := chunkstore.Ref{Hash: h, Size: chunkstore.ChunkSize}
	head := snapRecord{Tag: recHead, Refs: 4, Entry: vfs.ChangeEntry{Kind: vfs.EntryFile, Path: "f", Mode: 0o644,
		Chunks: chunkstore.Manifest{full, full}, Size: 2 * chunkstore.ChunkSize}}
	more := func(refs ...chunkstore.Ref) snapRecord { return snapRecord{Tag: recRefs, More: refs} }
	dir := snapRecord{Tag: recEntry, Entry: vfs.ChangeEntry{Kind: vfs.EntryDir, Path: "d", Mode: 0o755}}
	for _, tt := range []struct {
		name string
		recs []snapRecord
	}{
		{"continuation without a head", []snapRecord{dir, more(full)}},
		{"head cut short", []snapRecord{head, more(full)}},
		{"head interrupted", []snapRecord{head, dir, more(full, ref(c))}},
		{"more refs than declared", []snapRecord{head, more(full, full, ref(c))}},
		// A short ref that ends its record but not the file (a short ref
		// inside a record is refused by the page's decoder already).
		{"short ref before the last", []snapRecord{head, more(ref(c)), more(full)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cont := newStore(t, "container")
			r := newRig(t, nil, cont)
			sess := r.session(t)
			var st callStats
			_, err := snapBegin(ctx, sess, &st, Hash{9}, 1, len(tt.recs))
			must(t, err)
			// The chunk, then one page of the records.
			b, err := call(ctx, sess, &st, MethodSnapHave, syncwire.AppendHashes(nil, []chunkstore.Hash{h}))
			must(t, err)
			_ = b
			o, err := sess.Open(ctx, MethodSnapObjects, nil, true)
			must(t, err)
			must(t, o.Send(ctx, syncwire.AppendObjects(nil, []syncwire.Object{{Hash: h, Data: c}})))
			must(t, o.CloseSend())
			_, err = o.Reply(ctx)
			must(t, err)
			o.Close()
			var raw []byte
			for _, rec := range tt.recs {
				raw, err = appendRecord(raw, rec)
				must(t, err)
			}
			_, _, _, err = snapPage(ctx, sess, &st, 0, len(tt.recs), raw)
			must(t, err)
			_, _, err = snapCommit(ctx, sess, &st, Hash{9})
			if !errors.Is(err, rpc.ErrProtocol) {
				t.Fatalf("commit: err = %v, want ErrMalformed (EPROTOCOL)", err)
			}
			assertEmpty(t, cont)
		})
	}
}
