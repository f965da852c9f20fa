package computertest_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// The test helpers live in internal/...test packages so that the binaries
// do not link the testing package (and its flags). An exported helper that
// imports testing, put back into a package the binaries use, fails this.
func TestBinariesDoNotLinkTesting(t *testing.T) {
	for _, bin := range []string{
		"github.com/wsync/wsync/cmd/computerd",
		"github.com/wsync/wsync/cmd/workspace-server",
	} {
		t.Run(bin[strings.LastIndex(bin, "/")+1:], func(t *testing.T) {
			if chain := importChain(t, bin, "testing"); chain != nil {
				t.Errorf("%s links testing: %s", bin, strings.Join(chain, " -> "))
			}
		})
	}
}

// importChain is a path of imports from pkg to target among pkg's
// dependencies (go list -deps), or nil when pkg does not depend on target.
func importChain(t *testing.T, pkg, target string) []string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, pkg)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	if _, ok := imports[target]; !ok {
		return nil
	}
	from := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{pkg, "...", target}
}
