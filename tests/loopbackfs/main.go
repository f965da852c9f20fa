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
package main

import (
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
			if err := server.Unmount(); err == nil {
				return
			} else if i == 0 {
				log.Printf("unmount: %v (retrying)", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			log.Printf("lazy unmount: %v", err)
		}
	}()

	server.Wait()
}
