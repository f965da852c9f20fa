package vfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// GetAttr of a directory answers what its row holds, whether from what a
// mutation kept or from the row: random mutations of every kind (in
// groups, as the mount makes them, with group commits, failures and
// applies between them), and after each the attributes of every directory
// compared with a read of its row.
func TestKeptAttrsMatchTheRows(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, Owner: NewAttr{Uid: 1000, Gid: 1000}})
	must(t, err)
	defer s.Close()
	rnd := rand.New(rand.NewPCG(7, 12))
	dirs := []Ino{RootIno}
	names := map[Ino][]string{}
	hits := 0
	check := func(step int, what string) {
		t.Helper()
		for _, d := range dirs {
			_, pub := s.keptAttr(d)
			got, err := s.GetAttr(ctx, d)
			n, rerr := s.viewNode(ctx, d)
			if rerr != nil {
				if err == nil {
					t.Fatalf("step %d (%s): GetAttr of removed directory %d answered %+v", step, what, d, got)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d (%s): GetAttr(%d): %v", step, what, d, err)
			}
			if want := n.attr(); got != want {
				t.Fatalf("step %d (%s): GetAttr(%d) = %+v (kept: %v), the row holds %+v", step, what, d, got, pub, want)
			}
			if pub {
				hits++
			}
		}
	}
	for step := range 1200 {
		d := dirs[rnd.IntN(len(dirs))]
		name := fmt.Sprint("n", rnd.IntN(40))
		var what string
		switch op := rnd.IntN(10); {
		case op < 2:
			what = "create"
			if _, err := s.Create(ctx, d, name, NewAttr{Mode: 0o644}); err == nil {
				names[d] = append(names[d], name)
			}
		case op < 3:
			what = "create, write and close"
			if _, h, err := s.CreateOpen(ctx, d, name, NewAttr{Mode: 0o644}); err == nil {
				names[d] = append(names[d], name)
				check(step, "create before its write")
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
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour})
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
