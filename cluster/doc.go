// Package cluster lets several workspace-servers share workspaces through
// an S3-compatible object store (serve --object-store): it implements
// workspace.Ownership.
//
// Per workspace the bucket holds, under workspaces/<name>/:
//
//   - lease: who serves the workspace (package lease), renewed every third
//     of its TTL while the server runs;
//   - config.json: its registration (workspace.Published: the Config and
//     the computerd tokens), created conditionally by the server that
//     creates the workspace and rewritten only by the lease holder, each
//     write conditional on the ETag of the one before;
//   - db/gen-<G>/: the replica of its store under lease generation G
//     (package replica), written only by the holder of generation G.
//
// and chunks/ holds the chunk bytes of every workspace, content-addressed
// and shared (package sharedchunks).
//
// # Chunks
//
// An owned store's chunks go to the bucket (StoreOptions gives it the
// bucket as its chunkstore.Remote): each ship uploads what the store owes
// before the replicated commits that name it (replica.go's gate), and a
// chunk verified in the bucket more than half the collector's grace before
// its commit shipped is verified again. A store restored here from the
// bucket reads its chunks from there on first use; one kept across a
// restart verifies its chunks again before its first ship.
//
// # Collection
//
// CollectChunks (every Options.ChunkGCEvery, under the lease
// chunks-gc/lease so one server at a time) marks the chunks every
// registered workspace's newest replica references and hands them to
// sharedchunks.Collect, and deletes the replica generations older than
// the one each workspace's marks came from. The argument that it deletes
// nothing a workspace can still name is in docs/ARCHITECTURE.md, "Scaling
// out".
//
// # Claiming
//
// A server serves a workspace only while it holds the lease. A claim
// takes the lease (a new generation G) and keeps the local store only when
// this server held generation G-1 itself (its owner.json says so): then no
// other server wrote since, and the local copy is at least as new as the
// bucket's. Otherwise the local files are set aside and the newest replica
// of a generation below G is restored. The replica of G starts with a
// snapshot, so a later claim never reads a generation an older holder may
// still write to after it was fenced.
//
// A lease that cannot be renewed before its deadline (by this process's
// monotonic clock) is lost: the workspace stops being served here (its
// store and replication close, pushes are refused) and the next call
// claims it again or is sent to the new owner. Close hands every lease
// back after the stores closed, so another server takes over at once.
package cluster
