package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
)

// History shape of -git-commits: a source tree of gitFiles files of gitLines lines in gitDirs directories; every
// later commit edits gitEdits files (one line each, spread over the tree) and every second commit adds a file. Over
// 800 commits that touches every file several times, so a checkout 400 commits away rewrites most of the tree, like
// a real project's history.
const (
	gitFiles = 1200
	gitDirs  = 40
	gitLines = 80
	gitEdits = 8
	gitEpoch = 1767225600 // 2026-01-01T00:00:00Z: fixed dates, so the same flags give the same commit ids
)

// writeGitHistory writes a git fast-import stream of a deterministic history of n commits on refs/heads/main.
// `gentree -git-commits 800 | git -C REPO fast-import --quiet` builds the bench's local repository.
func writeGitHistory(out io.Writer, n int, seed uint64) error {
	w := bufio.NewWriterSize(out, 1<<20)
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], 0x617e) // a stream of its own, apart from the file trees'
	r := rand.New(rand.NewChaCha8(key))

	var files [][]string // lines of each file, in the order they were added
	newFile := func() {
		lines := make([]string, gitLines)
		for i := range lines {
			lines[i] = sourceLine(r)
		}
		files = append(files, lines)
	}
	path := func(i int) string { return fmt.Sprintf("pkg%02d/file%04d.go", i%gitDirs, i) }
	modify := func(i int) {
		fmt.Fprintf(w, "M 100644 inline %s\n", path(i))
		blob(w, strings.Join(files[i], "\n")+"\n")
	}

	for c := range n {
		fmt.Fprintf(w, "commit refs/heads/main\nmark :%d\n", c+1)
		for _, who := range []string{"author", "committer"} {
			fmt.Fprintf(w, "%s bench <bench@example.invalid> %d +0000\n", who, gitEpoch+60*c)
		}
		var changed []int
		switch {
		case c == 0:
			for range gitFiles {
				newFile()
				changed = append(changed, len(files)-1)
			}
		default:
			for k := range gitEdits {
				i := (c*gitEdits + k*97) % len(files)
				files[i][r.IntN(gitLines)] = sourceLine(r)
				changed = append(changed, i)
			}
			if c%2 == 0 {
				newFile()
				changed = append(changed, len(files)-1)
			}
		}
		blob(w, fmt.Sprintf("commit %d: %d files\n", c+1, len(changed)))
		if c > 0 {
			fmt.Fprintf(w, "from :%d\n", c)
		}
		for _, i := range changed {
			modify(i)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// blob writes a fast-import data block.
func blob(w *bufio.Writer, s string) {
	fmt.Fprintf(w, "data %d\n%s", len(s), s)
}

// sourceLine is one Go-like line of 20 to 70 characters.
func sourceLine(r *rand.Rand) string {
	var b strings.Builder
	b.WriteByte('\t')
	for want := 20 + r.IntN(50); b.Len() < want; {
		if r.IntN(4) == 0 {
			fmt.Fprintf(&b, "%d ", r.IntN(1000))
		} else {
			b.WriteString(words[r.IntN(len(words))] + " ")
		}
	}
	return strings.TrimRight(b.String(), " ")
}
