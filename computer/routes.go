package computer

import (
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Version is computerd's build version.
var Version = "0.1.0"

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"ok": true})
	})
	token := bearer.New(d.cfg.Token)
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !token.Check(r) {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /info", auth(d.info))
	mux.HandleFunc("GET /stats", auth(d.stats))
	mux.HandleFunc("GET /watermarks", auth(d.watermarks))
	// What promhttp.Handler serves (its own promhttp_metric_handler_*
	// series included), with the process's collectors registered first.
	metricsHandler := promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer,
		promhttp.HandlerFor(metrics.Gatherer(), promhttp.HandlerOpts{}))
	mux.Handle("GET /metrics", auth(metricsHandler.ServeHTTP))
	// The sync server checks the token on the upgrade itself.
	mux.Handle("GET /sync", d.sync)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (d *Daemon) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{
		"version":  Version,
		"protocol": map[string]int{"min": rpc.ProtocolMinVersion, "max": rpc.ProtocolMaxVersion},
		"mount":    d.cfg.Mount,
		"runtime":  rpc.RuntimeID.String(),
		"store":    d.store.ID(),
		"state":    d.cfg.State,
		"uptime_s": int64(time.Since(d.start).Seconds()),
	})
}

type statsDoc struct {
	Rev      int64         `json:"rev"`
	Store    vfs.Counts    `json:"store"`
	Usage    vfs.Usage     `json:"usage"`
	Quota    vfs.Quota     `json:"quota"`
	Fuse     fusefs.Stats  `json:"fuse"`
	Exec     execrun.Stats `json:"exec"`
	RSSBytes int64         `json:"rss_bytes"`
	Heap     uint64        `json:"heap_bytes"`
}

func (d *Daemon) stats(w http.ResponseWriter, r *http.Request) {
	cs, err := d.store.Counts(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	writeJSON(w, statsDoc{
		Rev: d.store.CurrentRev(), Store: cs, Usage: d.store.Usage(), Quota: d.store.Quota(), Fuse: d.mnt.Stats(), Exec: d.runner.Stats(),
		RSSBytes: RSS(), Heap: ms.HeapInuse,
	})
}

func (d *Daemon) watermarks(w http.ResponseWriter, r *http.Request) {
	all, err := d.store.AllWatermarks(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	c := func(c watermark.Cursor) map[string]any {
		m := map[string]any{"rev": c.Rev}
		if c.Partial {
			m["path"] = c.Path
		}
		return m
	}
	peers := map[string]any{}
	for p, set := range all {
		peers[p] = map[string]any{"push": c(set.Push), "fetch": c(set.Fetch), "applied_push": c(set.AppliedPush)}
	}
	writeJSON(w, map[string]any{"current_rev": d.store.CurrentRev(), "served": d.store.Served(), "store": d.store.ID(), "peers": peers})
}

// RSS is the process's resident set size in bytes, from /proc.
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
