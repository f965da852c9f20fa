// Command gentree writes a deterministic benchmark tree: the same flags always give byte-identical files.
//
//	gentree -n 10000 -total 100000000 DIR   10,000 files of varied sizes adding up to exactly 100 MB, spread over
//	                                        100 package-like directories (pkgNNN/, pkgNNN/lib/, pkgNNN/lib/internal/,
//	                                        pkgNNN/test/), like an npm-installed tree
//	gentree -n 16 -size 67108864 DIR        16 files of exactly 64 MiB each (fileNN.bin)
//	gentree -git-commits 800 | git fast-import   a git history of 800 commits of a Go-like source tree (1,200 files,
//	                                        growing to 1,600), as a fast-import stream on stdout (githistory.go)
//
// Contents come from a ChaCha8 stream seeded by (-seed, file index): -kind random gives incompressible bytes (the
// default, so no side's compression matters), -kind text gives source-like lines that compress about 3-4x.
// It prints "files N bytes B" on stdout. DIR must be empty or missing.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

func main() {
	n := flag.Int("n", 10000, "number of files")
	total := flag.Int64("total", 100_000_000, "total bytes, split over files of varied sizes (ignored with -size)")
	size := flag.Int64("size", 0, "if > 0, every file has exactly this size (flat layout fileNN.bin)")
	seed := flag.Uint64("seed", 1, "stream seed")
	kind := flag.String("kind", "random", "content: random (incompressible) or text (compressible)")
	gitCommits := flag.Int("git-commits", 0, "if > 0, write a git fast-import stream of that many commits to stdout instead of a tree")
	flag.Parse()
	if *gitCommits > 0 && flag.NArg() == 0 {
		if err := writeGitHistory(os.Stdout, *gitCommits, *seed); err != nil {
			fatal(err)
		}
		return
	}
	if flag.NArg() != 1 || *n <= 0 || (*kind != "random" && *kind != "text") {
		fmt.Fprintln(os.Stderr, "usage: gentree [-n N] [-total BYTES | -size BYTES] [-seed S] [-kind random|text] DIR\n       gentree -git-commits N [-seed S] >STREAM")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		fatal(fmt.Errorf("%s is not empty", dir))
	}

	sizes := make([]int64, *n)
	if *size > 0 {
		for i := range sizes {
			sizes[i] = *size
		}
	} else {
		sizes = variedSizes(*n, *total, *seed)
	}

	var sum int64
	for i, sz := range sizes {
		p := filepath.Join(dir, name(i, *size > 0))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fatal(err)
		}
		if err := writeFile(p, sz, *seed, uint64(i), *kind); err != nil {
			fatal(err)
		}
		sum += sz
	}
	fmt.Printf("files %d bytes %d\n", len(sizes), sum)
}

// variedSizes draws n log-uniform sizes between 64 B and 64 KiB (median about 2 KiB, a long tail like source and
// package trees) and scales them so they add up to exactly total.
func variedSizes(n int, total int64, seed uint64) []int64 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	raw := make([]float64, n)
	var sum float64
	for i := range raw {
		raw[i] = math.Exp(math.Log(64) + r.Float64()*(math.Log(65536)-math.Log(64)))
		sum += raw[i]
	}
	sizes := make([]int64, n)
	var got int64
	for i := range raw {
		sizes[i] = int64(raw[i] * float64(total) / sum)
		got += sizes[i]
	}
	sizes[n-1] += total - got // rounding remainder
	if sizes[n-1] < 0 {
		sizes[n-1] = 0
	}
	return sizes
}

func name(i int, flat bool) string {
	if flat {
		return fmt.Sprintf("file%02d.bin", i)
	}
	sub := [...]string{"", "lib", "lib/internal", "test"}[i%4]
	return filepath.Join(fmt.Sprintf("pkg%03d", i/100%1000), sub, fmt.Sprintf("f%05d.dat", i))
}

var words = []string{"func", "return", "const", "var", "if", "else", "for", "range", "package", "import", "type",
	"struct", "interface", "map", "string", "int", "error", "nil", "true", "false", "module", "export", "require"}

func writeFile(p string, size int64, seed, index uint64, kind string) error {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], index)
	stream := rand.NewChaCha8(key)

	f, err := os.Create(p)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	buf := make([]byte, 64<<10)
	for left := size; left > 0; {
		chunk := buf[:min(int64(len(buf)), left)]
		if kind == "random" {
			_, _ = stream.Read(chunk)
		} else {
			fillText(chunk, stream)
		}
		if _, err := w.Write(chunk); err != nil {
			f.Close()
			return err
		}
		left -= int64(len(chunk))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fillText(b []byte, s *rand.ChaCha8) {
	r := rand.New(s)
	i := 0
	for i < len(b) {
		var tok string
		switch x := r.IntN(10); {
		case x == 0:
			tok = "\n"
		case x < 3:
			tok = fmt.Sprintf("%d ", r.IntN(1000))
		default:
			tok = words[r.IntN(len(words))] + " "
		}
		i += copy(b[i:], tok)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gentree:", err)
	os.Exit(1)
}
