package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Go floors BenchmarkCLIStart measures beside the CLI: the least any Go
// program pays to start on this machine, and the least a Go client pays that
// links net/http and makes the verb's one failing request.
const (
	goHelloSrc = `package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
`
	goHTTPSrc = `package main

import (
	"net/http"
	"os"
)

func main() {
	if _, err := http.Get(os.Args[1]); err != nil {
		os.Exit(1)
	}
}
`
)

// BenchmarkCLIStart: the start of the CLI a user types (issue 12).
// `workspace-server --help` and a client verb that reaches the network
// (`status` against a closed loopback port: flag parsing, the token
// lookup, one refused connect, exit 1), interleaved run by run with
// /bin/true and two Go programs built in the same run (goHelloSrc,
// goHTTPSrc), so load on the machine falls on all of them alike:
//
//	go test -run '^$' -bench CLIStart -benchtime 1x ./tests
//
// The binary is the one TestMain builds with a plain `go build`, as
// `go install` does.
func BenchmarkCLIStart(b *testing.B) {
	dir := b.TempDir()
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	closed := "http://" + freePort(b)
	cases := []struct {
		name string
		argv []string
		code int    // the exit code the run must end with
		want string // on stderr, when not empty
	}{
		{"true", []string{truePath}, 0, ""},
		{"go-hello", []string{goFloor(b, dir, "hello", goHelloSrc)}, 0, ""},
		{"go-http", []string{goFloor(b, dir, "http", goHTTPSrc), closed}, 1, ""},
		{"help", []string{bin.server, "--help"}, 0, ""},
		{"verb", []string{bin.server, "status", "--server", closed}, 1, "connection refused"},
	}
	// Each case once, checked: a case that does not do what it claims
	// would measure something else.
	for _, c := range cases {
		var stderr bytes.Buffer
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Dir, cmd.Stderr = dir, &stderr // no data/token here: the verb sends no token
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			b.Fatalf("%s: exit %d, stderr %q; want exit %d and %q", c.name, code, stderr.String(), c.code, c.want)
		}
	}
	const runs = 100
	for range b.N {
		times := make([][]time.Duration, len(cases))
		for range runs {
			for i, c := range cases {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				cmd.Dir = dir
				start := time.Now()
				cmd.Run() // its exit code was checked above
				times[i] = append(times[i], time.Since(start))
			}
		}
		p50 := make(map[string]time.Duration)
		for i, c := range cases {
			p50[c.name] = percentile(times[i], 0.5)
			b.ReportMetric(float64(p50[c.name].Microseconds())/1000, c.name+"-p50-ms")
			if c.name == "verb" {
				b.ReportMetric(float64(percentile(times[i], 0.9).Microseconds())/1000, "verb-p90-ms")
			}
		}
		b.ReportMetric(p50["verb"].Seconds()/p50["true"].Seconds(), "verb/true")
		b.ReportMetric(p50["verb"].Seconds()/p50["go-http"].Seconds(), "verb/go-http")
	}
}

// goFloor builds src, a main package of the standard library only, and
// returns the binary's path.
func goFloor(b *testing.B, dir, name, src string) string {
	b.Helper()
	mod := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		b.Fatal(err)
	}
	for file, text := range map[string]string{"go.mod": "module " + name + "\n\ngo 1.26\n", "main.go": src} {
		if err := os.WriteFile(filepath.Join(mod, file), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", name, err, msg)
	}
	return out
}
