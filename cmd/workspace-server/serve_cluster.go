package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/wsync/wsync/cluster"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/sharedchunks"
)

// clusterFlags are serve's object-store flags (issue 15, docs/ARCHITECTURE
// "Scaling out").
type clusterFlags struct {
	store, advertise, ttl, every, gcEvery, gcGrace *string
}

const clusterHelp = `
Object store: several servers share workspaces (each with its environment twin):
  --object-store URL          WSYNC_OBJECT_STORE     s3://bucket/prefix?endpoint=http://HOST:PORT&region=R; credentials
                                                     from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)
  --advertise URL             WSYNC_ADVERTISE        where other servers send this server's callers (default http://LISTEN)
  --lease-ttl 15s             WSYNC_LEASE_TTL        how long a dead server holds its workspaces before another takes them
  --replicate-every 1s        WSYNC_REPLICATE_EVERY  how often a workspace's store ships to the object store (the lag bound)
  --chunk-gc-every 1h         WSYNC_CHUNK_GC_EVERY   how often to collect chunks no workspace references (0: never)
  --chunk-gc-grace 1h         WSYNC_CHUNK_GC_GRACE   how long unreferenced chunks are kept, then trashed (same on every server)
  workspace-server serve --object-store 's3://wsync/prod?endpoint=http://10.0.0.5:7070' --advertise http://10.0.0.7:8080
`

func (c *command) clusterFlags() *clusterFlags {
	return &clusterFlags{
		store:     c.fs.String("object-store", env("WSYNC_OBJECT_STORE", ""), "share workspaces with other servers through this S3 URL: s3://bucket/prefix?endpoint=URL&region=R (env WSYNC_OBJECT_STORE; default: none, this server's disk only)"),
		advertise: c.fs.String("advertise", env("WSYNC_ADVERTISE", ""), "this server's API URL as other servers give it to callers (env WSYNC_ADVERTISE; default http://LISTEN)"),
		ttl:       c.fs.String("lease-ttl", env("WSYNC_LEASE_TTL", cluster.DefaultLeaseTTL.String()), "how long a workspace's lease lasts unrenewed: a dead server's workspaces are taken over after it (env WSYNC_LEASE_TTL)"),
		every:     c.fs.String("replicate-every", env("WSYNC_REPLICATE_EVERY", cluster.DefaultReplicateEvery.String()), "how often each workspace's store ships to the object store (env WSYNC_REPLICATE_EVERY)"),
		gcEvery:   c.fs.String("chunk-gc-every", env("WSYNC_CHUNK_GC_EVERY", cluster.DefaultChunkGCEvery.String()), "how often this server tries to collect the object store's unreferenced chunks, one server at a time; 0: never (env WSYNC_CHUNK_GC_EVERY)"),
		gcGrace:   c.fs.String("chunk-gc-grace", env("WSYNC_CHUNK_GC_GRACE", sharedchunks.DefaultGrace.String()), "how old an unreferenced chunk must be before it is set aside, and how long it stays in the trash; the same on every server (env WSYNC_CHUNK_GC_GRACE)"),
	}
}

// open builds the cluster the flags ask for; nil without --object-store.
// A bad value is a usage error's message (usage true), a store that cannot
// be reached or ignores conditional writes a failure.
func (f *clusterFlags) open(ctx context.Context, data, listen string, log *slog.Logger) (cl *cluster.Cluster, usage bool, err error) {
	if *f.store == "" {
		return nil, false, nil
	}
	cfg, err := objstore.ParseURL(*f.store)
	if err != nil {
		return nil, true, fmt.Errorf("--object-store: %w", err)
	}
	ttl, err := time.ParseDuration(*f.ttl)
	if err != nil || ttl < time.Second {
		return nil, true, fmt.Errorf("--lease-ttl %q: want a duration of 1s or more", *f.ttl)
	}
	every, err := time.ParseDuration(*f.every)
	if err != nil || every <= 0 || every > ttl {
		return nil, true, fmt.Errorf("--replicate-every %q: want a positive duration no longer than --lease-ttl", *f.every)
	}
	gcEvery, err := time.ParseDuration(*f.gcEvery)
	if err != nil || gcEvery < 0 {
		return nil, true, fmt.Errorf("--chunk-gc-every %q: want a duration, 0 for never", *f.gcEvery)
	}
	if gcEvery == 0 {
		gcEvery = -1 // cluster.Options: negative is never
	}
	gcGrace, err := time.ParseDuration(*f.gcGrace)
	if err != nil || gcGrace < 4*every || gcGrace < time.Second {
		return nil, true, fmt.Errorf("--chunk-gc-grace %q: want a duration of 1s or more and at least 4 times --replicate-every", *f.gcGrace)
	}
	addr := *f.advertise
	if addr == "" {
		addr = "http://" + listen
		if h, _, err := net.SplitHostPort(listen); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
			return nil, true, fmt.Errorf("--advertise: needed when --listen %q names no host other servers can reach", listen)
		}
	}
	if u, err := url.Parse(addr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
		return nil, true, fmt.Errorf("--advertise %q: want http(s)://HOST:PORT", addr)
	}
	st, err := objstore.Open(ctx, cfg)
	if err != nil {
		return nil, false, err
	}
	id, err := cluster.ServerID(data)
	if err != nil {
		return nil, false, err
	}
	if err := st.CheckConditional(ctx, id); err != nil {
		return nil, false, err
	}
	cl, err = cluster.New(cluster.Options{Store: st, ServerID: id, Address: addr, LeaseTTL: ttl, ReplicateEvery: every,
		ChunkGCEvery: gcEvery, ChunkGCGrace: gcGrace, Logger: log})
	if err != nil {
		return nil, false, err
	}
	log.Info("object store", "url", cfg.String(), "server_id", id, "advertise", addr, "lease_ttl", ttl, "chunk_gc_every", gcEvery, "chunk_gc_grace", gcGrace)
	return cl, false, nil
}
