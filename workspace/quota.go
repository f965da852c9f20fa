package workspace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/vfs"
)

// Quotas. A workspace's quota (Config.Quota: max bytes, max entries, max
// file size, 0 for no bound) is set at creation (CreateOptions.Quota) and
// changed by SetQuota; the registry keeps it. Its store enforces it
// (vfs.Store.SetQuota: the files API's writes, the pulls), and the driver
// hands it to each runtime's computerd on its next sync, whose mount
// enforces it too (syncwire: SetQuota). A pull stopped by it leaves the
// runtime's pending record in the PendingQuota state: the background
// puller does not retry it on a timer, SetQuota restarts it, and the
// container keeps what the pull did not fetch.

// QuotaStatus is a workspace's usage against its quota (Status.Quota).
type QuotaStatus struct {
	vfs.Quota
	Used vfs.Usage `json:"used"`
}

// Quota is the workspace's quota.
func (w *Workspace) Quota() vfs.Quota {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return w.cfg.Quota
}

// SetQuota changes the workspace's quota and persists it. A quota below
// the usage keeps everything stored and refuses what would grow it; a
// raised one restarts pulls the old one stopped.
func (w *Workspace) SetQuota(ctx context.Context, q vfs.Quota) (vfs.Quota, error) {
	if err := q.Validate(); err != nil {
		return vfs.Quota{}, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
	}
	s, err := w.Store(ctx)
	if err != nil {
		return vfs.Quota{}, err
	}
	w.m.mu.Lock()
	w.stateMu.Lock()
	old := w.cfg.Quota
	w.cfg.Quota = q
	w.stateMu.Unlock()
	err = ErrClosed
	if !w.m.closed {
		err = w.m.saveLocked()
	}
	if err != nil {
		w.stateMu.Lock()
		w.cfg.Quota = old
		w.stateMu.Unlock()
		w.m.mu.Unlock()
		return vfs.Quota{}, fmt.Errorf("workspace %q: quota: %w", w.cfg.Name, err)
	}
	w.m.mu.Unlock()
	if err := s.SetQuota(q); err != nil {
		return vfs.Quota{}, err
	}
	w.log.Info("quota changed", "from", old, "to", q)
	w.stateMu.Lock()
	rss := w.sortedLocked()
	w.stateMu.Unlock()
	for _, rs := range rss {
		w.stateMu.Lock()
		stopped := rs.pending != nil && rs.pending.State == PendingQuota
		w.stateMu.Unlock()
		if !stopped {
			continue
		}
		// A pull the old quota stopped goes again.
		err := w.updatePending(rs, func(old *PendingPull) *PendingPull {
			if old == nil || old.State != PendingQuota {
				return old
			}
			p := *old
			p.State = PendingRunning
			return &p
		})
		if err != nil {
			rs.log.Warn("quota raised: the pending pull stays stopped", "err", err)
		}
		w.kick(rs)
	}
	return q, nil
}

// quotaStatus is the workspace's usage against its quota.
func quotaStatus(s *vfs.Store) *QuotaStatus {
	return &QuotaStatus{Quota: s.Quota(), Used: s.Usage()}
}

// Usage metrics: read at scrape time from the stores that are open, so
// they are never stale and a scrape opens nothing.
var (
	usageManagers   = map[*Manager]struct{}{}
	usageManagersMu sync.Mutex

	descUsed = prometheus.NewDesc("wsync_workspace_quota_used",
		"What a workspace's store holds, by workspace and resource (bytes: logical file sizes; entries: nodes).",
		[]string{"workspace", "resource"}, nil)
	descLimit = prometheus.NewDesc("wsync_workspace_quota_limit",
		"A workspace's quota, by workspace and resource (bytes, entries, file_size); absent when unbounded.",
		[]string{"workspace", "resource"}, nil)
)

type usageCollector struct{}

var _ = metrics.Add(usageCollector{})

func (usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUsed
	ch <- descLimit
}

func (usageCollector) Collect(ch chan<- prometheus.Metric) {
	usageManagersMu.Lock()
	ms := make([]*Manager, 0, len(usageManagers))
	for m := range usageManagers {
		ms = append(ms, m)
	}
	usageManagersMu.Unlock()
	for _, m := range ms {
		m.mu.Lock()
		ws := make([]*Workspace, 0, len(m.ws))
		for _, w := range m.ws {
			ws = append(ws, w)
		}
		m.mu.Unlock()
		slices.SortFunc(ws, func(a, b *Workspace) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
		for _, w := range ws {
			w.storeMu.Lock()
			s := w.store
			w.storeMu.Unlock()
			if s == nil {
				continue
			}
			u, q := s.Usage(), s.Quota()
			name := w.cfg.Name
			ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(u.Bytes), name, "bytes")
			ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(u.Entries), name, "entries")
			for _, l := range []struct {
				res string
				v   int64
			}{{"bytes", q.MaxBytes}, {"entries", q.MaxEntries}, {"file_size", q.MaxFileSize}} {
				if l.v > 0 {
					ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(l.v), name, l.res)
				}
			}
		}
	}
}

// trackUsage adds m to (or, closed, removes it from) the usage metrics.
func trackUsage(m *Manager, on bool) {
	usageManagersMu.Lock()
	defer usageManagersMu.Unlock()
	if on {
		usageManagers[m] = struct{}{}
	} else {
		delete(usageManagers, m)
	}
}
