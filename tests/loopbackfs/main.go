// Command loopbackfs mounts go-fuse's loopback filesystem (fs.NewLoopbackRoot) of a source directory at a mount
// point. It is the baseline for the mount benchmark (tests/bench/mountbench.sh): the floor that any Go FUSE
// filesystem built on go-fuse's fs package pays, with the same mount options our own mount (fusefs, computerd) uses:
// allow_other + default_permissions, a direct mount(2) call, 1 s entry and attribute timeouts and a 1 MiB MaxWrite.
//
// Usage:
//
//	loopbackfs [flags] SOURCE MOUNTPOINT
//
// It stays in the foreground, prints "mounted" on stdout once the mount is live, and unmounts on SIGTERM or SIGINT.
// It exits 0 after a clean unmount.
//
// Passthrough: go-fuse v2.12 hands every opened loopback file to the kernel as a FUSE passthrough backing file
// (FOPEN_PASSTHROUGH, kernel >= 6.9, needs root), so reads and writes never reach this process; only metadata does.
// That is go-fuse's default and what -passthrough=true (the default) measures. A filesystem whose bytes do not live
// in one backing file per open file (ours: files are manifests of content-addressed chunks) must serve READ and WRITE
// in user space; -passthrough=false measures that floor: the same loopback, with every READ and WRITE going through
// the daemon.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("loopbackfs: ")

	entryTimeout := flag.Duration("entry-timeout", time.Second, "kernel dentry cache timeout")
	attrTimeout := flag.Duration("attr-timeout", time.Second, "kernel attribute cache timeout")
	negTimeout := flag.Duration("negative-timeout", 0, "kernel negative-lookup cache timeout (0: not cached)")
	maxWrite := flag.Int("max-write", 1<<20, "MaxWrite (and max_read) in bytes; go-fuse caps it at 1 MiB")
	allowOther := flag.Bool("allow-other", true, "mount with allow_other and default_permissions")
	directMount := flag.Bool("direct-mount", true, "call mount(2) directly instead of fusermount (falls back)")
	passthrough := flag.Bool("passthrough", true, "let the kernel do file I/O on the backing files (go-fuse default)")
	locks := flag.Bool("locks", false, "forward POSIX/flock locks to the filesystem")
	debug := flag.Bool("debug", false, "log every FUSE request")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [flags] SOURCE MOUNTPOINT\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	src, mnt := flag.Arg(0), flag.Arg(1)

	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		log.Fatalf("NewLoopbackRoot(%s): %v", src, err)
	}
	if !*passthrough {
		ln := root.(*fs.LoopbackNode)
		wrapped := &noPassthroughNode{ln}
		ln.RootData.RootNode = wrapped
		root = wrapped
	}

	opts := &fs.Options{
		EntryTimeout:    entryTimeout,
		AttrTimeout:     attrTimeout,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			AllowOther:  *allowOther,
			DirectMount: *directMount,
			MaxWrite:    *maxWrite,
			EnableLocks: *locks,
			Debug:       *debug,
			FsName:      src,
			Name:        "loopbackfs",
		},
	}
	if *negTimeout > 0 {
		opts.NegativeTimeout = negTimeout
	}
	if *allowOther {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}

	server, err := fs.Mount(mnt, root, opts)
	if err != nil {
		log.Fatalf("mount %s: %v", mnt, err)
	}
	fmt.Println("mounted")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		log.Printf("%v: unmounting %s", s, mnt)
		// A busy mount refuses a plain unmount; retry for a while, then detach it lazily so nothing is left behind.
		for i := 0; i < 50; i++ {
			err := server.Unmount()
			if err == nil {
				return
			}
			if i == 0 {
				log.Printf("unmount: %v (retrying)", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			log.Printf("lazy unmount: %v", err)
		}
		os.Exit(1)
	}()

	server.Wait()
}

// noPassthroughNode is a loopback node whose open files are served by the daemon (no FUSE passthrough). Children
// are wrapped too (NodeWrapChilder), so the whole tree behaves the same way.
type noPassthroughNode struct {
	*fs.LoopbackNode
}

var (
	_ fs.NodeWrapChilder    = (*noPassthroughNode)(nil)
	_ fs.NodeOpener         = (*noPassthroughNode)(nil)
	_ fs.NodeCreater        = (*noPassthroughNode)(nil)
	_ fs.NodeCopyFileRanger = (*noPassthroughNode)(nil)
)

func (n *noPassthroughNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &noPassthroughNode{ln}
	}
	return ops
}

func (n *noPassthroughNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return wrapFile(fh), fuseFlags, errno
}

func (n *noPassthroughNode) Create(ctx context.Context, name string, flags uint32, mode uint32,
	out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return ch, wrapFile(fh), fuseFlags, errno
}

// CopyFileRange unwraps the handles: go-fuse's loopback only copies between its own *LoopbackFile handles.
func (n *noPassthroughNode) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode,
	fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return n.LoopbackNode.CopyFileRange(ctx, unwrapFile(fhIn), offIn, out, unwrapFile(fhOut), offOut, length, flags)
}

// noPassthroughFile is a *fs.LoopbackFile without the PassthroughFd method: the field of the same name, at a
// shallower depth, hides the promoted method, so the handle does not implement fs.FilePassthroughFder and go-fuse
// serves READ and WRITE through the daemon. Every other File* interface of LoopbackFile is still promoted.
type noPassthroughFile struct {
	*fs.LoopbackFile
	PassthroughFd struct{} //nolint:unused // shadows (*fs.LoopbackFile).PassthroughFd
}

func wrapFile(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &noPassthroughFile{LoopbackFile: lf}
	}
	return fh
}

func unwrapFile(fh fs.FileHandle) fs.FileHandle {
	if f, ok := fh.(*noPassthroughFile); ok {
		return f.LoopbackFile
	}
	return fh
}

// The shadowing must hold; fail the build if a refactor brings the method back.
var _ = func() bool {
	var fh fs.FileHandle = &noPassthroughFile{}
	_, ok := fh.(fs.FilePassthroughFder)
	if ok {
		panic("noPassthroughFile implements FilePassthroughFder")
	}
	return ok
}()
