package computer_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/internal/testutil"
)

// The packages' collectors are registered when /metrics is set up, not at
// init (internal/metrics, issue 12): computerd's /metrics still lists
// them, and what promhttp.Handler served besides.
func TestMetricsListsCollectors(t *testing.T) {
	d := computertest.Start(t, computer.Config{Token: "tok"})
	status, body, _ := testutil.Request(t, "GET", "http://"+d.Addr()+"/metrics", "Bearer tok", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %q", status, body)
	}
	for _, name := range []string{"wsync_fuse_ops_total", "wsync_fuse_open_handles", "wsync_exec_running",
		"wsync_syncwire_stream_buffered_bytes", "wsync_vfs_group_mutations_total", "go_goroutines",
		"promhttp_metric_handler_requests_total"} {
		if !strings.Contains(string(body), "\n# TYPE "+name+" ") {
			t.Errorf("/metrics has no %s", name)
		}
	}
}
