package vfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
)

// GetAttr answers what a node's row holds, whether from what a mutation
// kept or from the row: random mutations of every kind (in groups, as the
// mount makes them, with group commits and failures between them), and
// after each the attributes of every directory and file ever made
// compared with a read of its row. Every 50 steps a peer takes the
// changes since the last time, as a pull would, and must hold the same
// tree: what the mutations left in the change feed is whole and right,
// whether they read their rows or took them from what was kept.
func TestKeptAttrsMatchTheRows(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, Owner: NewAttr{Uid: 1000, Gid: 1000}})
	must(t, err)
	defer s.Close()
	peer := newStore(t)
	var cursor watermark.Cursor
	rnd := rand.New(rand.NewPCG(7, 12))
	dirs := []Ino{RootIno}
	var files []Ino
	names := map[Ino][]string{}
	hits := 0
	check := func(step int, what string) {
		t.Helper()
		for _, d := range append(dirs[:len(dirs):len(dirs)], files...) {
			_, pub := s.keptAttr(d)
			got, err := s.GetAttr(ctx, d)
			n, rerr := s.viewNode(ctx, d)
			if rerr != nil {
				if err == nil {
					t.Fatalf("step %d (%s): GetAttr of removed node %d answered %+v", step, what, d, got)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d (%s): GetAttr(%d): %v", step, what, d, err)
			}
			if want := s.overlay(n.attr()); got != want {
				t.Fatalf("step %d (%s): GetAttr(%d) = %+v (kept: %v), the row holds %+v", step, what, d, got, pub, want)
			}
			if pub {
				hits++
			}
		}
	}
	for step := range 1500 {
		if step%50 == 49 {
			cursor = syncInto(t, s, peer, cursor, Ignore{})
			if d := diffTrees(tree(t, s), tree(t, peer)); d != "" {
				t.Fatalf("step %d: the peer's tree differs after a pull:\n%s", step, d)
			}
		}
		d := dirs[rnd.IntN(len(dirs))]
		name := fmt.Sprint("n", rnd.IntN(40))
		var what string
		if len(files) > 0 && rnd.IntN(3) == 0 {
			// A file's own mutations: a rewrite through a handle (the
			// GetAttr while it is open shows its buffered size), a
			// truncate, new times, a second name.
			f := files[rnd.IntN(len(files))]
			switch rnd.IntN(4) {
			case 0:
				what = "rewrite"
				if h, err := s.OpenHandle(ctx, f); err == nil {
					_, err = h.WriteAt(ctx, make([]byte, rnd.IntN(3000)), int64(rnd.IntN(2000)))
					must(t, err)
					check(step, "rewrite before its close")
					must(t, h.Release(ctx))
				}
			case 1:
				what = "truncate"
				size := int64(rnd.IntN(5000))
				s.SetAttr(ctx, f, SetAttr{Size: &size})
			case 2:
				what = "utimes"
				at, mt := time.Unix(int64(step), 1), time.Unix(int64(step), 2)
				s.SetAttr(ctx, f, SetAttr{Atime: &at, Mtime: &mt})
			default:
				what = "link"
				if _, err := s.Link(ctx, f, d, name); err == nil {
					names[d] = append(names[d], name)
				}
			}
			check(step, what)
			continue
		}
		switch op := rnd.IntN(10); {
		case op < 2:
			what = "create"
			if a, err := s.Create(ctx, d, name, NewAttr{Mode: 0o644}); err == nil {
				names[d] = append(names[d], name)
				files = append(files, a.Ino)
			}
		case op < 3:
			what = "create, write and close"
			if a, h, err := s.CreateOpen(ctx, d, name, NewAttr{Mode: 0o644}); err == nil {
				names[d] = append(names[d], name)
				files = append(files, a.Ino)
				// A pull between the create and the commit (which takes
				// the new file's row and paths from what the create
				// kept): the commit's change row must bring the content.
				cursor = syncInto(t, s, peer, cursor, Ignore{})
				_, err = h.WriteAt(ctx, []byte(name), 0)
				must(t, err)
				must(t, h.Release(ctx))
			}
		case op < 5:
			what = "mkdir"
			if a, err := s.Mkdir(ctx, d, name, NewAttr{Mode: 0o755}); err == nil {
				dirs = append(dirs, a.Ino)
				names[d] = append(names[d], name)
			}
		case op < 7:
			what = "unlink or rmdir"
			if len(names[d]) > 0 {
				victim := names[d][rnd.IntN(len(names[d]))]
				if s.Unlink(ctx, d, victim) != nil {
					s.Rmdir(ctx, d, victim)
				}
			}
		case op < 8:
			what = "chmod"
			m := uint32(0o700 + rnd.IntN(0o77))
			target := d
			if len(names[d]) > 0 && rnd.IntN(2) == 0 {
				// A child, file or directory.
				if a, err := s.Lookup(ctx, d, names[d][rnd.IntN(len(names[d]))]); err == nil {
					target = a.Ino
				}
			}
			mtime := time.Unix(int64(step), 0)
			s.SetAttr(ctx, target, SetAttr{Mode: &m, Mtime: &mtime})
		case op < 9:
			what = "rename"
			to := dirs[rnd.IntN(len(dirs))]
			if len(names[d]) > 0 {
				s.Rename(ctx, d, names[d][rnd.IntN(len(names[d]))], to, name, 0)
			}
		default:
			what = "sync"
			must(t, s.Sync(ctx))
		}
		check(step, what)
	}
	if hits == 0 {
		t.Fatal("no GetAttr was answered from kept attributes: the test checks nothing of them")
	}
	t.Logf("%d answers from kept attributes", hits)
}

// A directory GetAttr kept and then removed is gone for GetAttr too, and
// a parent kept across a create shows the create's times.
func TestKeptDirectoryAttrs(t *testing.T) {
	// Without the write-behind, whose memo answers these first.
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, NoWriteBehind: true})
	must(t, err)
	defer s.Close()
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	if _, err := s.GetAttr(ctx, RootIno); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAttr(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	_, err = s.Create(ctx, RootIno, "f", NewAttr{Mode: 0o644})
	must(t, err)
	kept, ok := s.keptAttr(RootIno)
	row, err := s.viewNode(ctx, RootIno)
	must(t, err)
	if !ok || kept != row.attr() {
		t.Fatalf("root after a create: kept %v %+v, the row holds %+v", ok, kept, row.attr())
	}
	must(t, s.Rmdir(ctx, RootIno, "d"))
	if a, err := s.GetAttr(ctx, d.Ino); !errors.Is(err, ErrNotExist) {
		t.Fatalf("GetAttr of a removed directory = %+v, %v; want ErrNotExist", a, err)
	}
}
