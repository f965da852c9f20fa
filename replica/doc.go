// Package replica streams a workspace's SQLite store (package vfs) to an
// object store bucket with Litestream used as a library
// (github.com/benbjohnson/litestream, its S3 client), and restores it.
//
// # Layout and fencing
//
// The owner of a workspace holds a lease with a generation G and
// replicates to Prefix/gen-<G>/ (GenerationDir: G zero-padded to 16
// digits, so keys sort), in litestream's layout below it
// (<level in hex>/<minTXID>-<maxTXID>.ltx; level 9 holds snapshots).
// A paused old owner's late writes therefore land in its own
// generation's prefix, which no later owner reads once a newer
// generation holds a snapshot. Options.Fence runs before every write to
// the bucket (the wrapped litestream.ReplicaClient, fence.go: LTX
// uploads, compactions, snapshots, retention deletes); a refusal fails
// the write with ErrFenced, and the Replicator stops counting as caught
// up. Fencing by prefix covers what a check before the write cannot (a
// process paused between the check and its PUT).
//
// # Checkpoints
//
// Litestream must own checkpointing: it holds a read transaction so the
// WAL cannot restart behind it, and checkpoints itself after copying the
// frames. The store is opened with vfs.Options.ExternalCheckpoint (no vfs
// checkpointer, writer wal_autocheckpoint=0, no TRUNCATE at Close);
// litestream checkpoints (PASSIVE) past 1,000 WAL pages and every minute
// (TestManyCommitsEqualTheSource: 3,000 commits, a bounded WAL, a restore
// equal to the source row for row).
//
// # Ships and the gate
//
// No monitor of litestream's runs (DB.MonitorInterval = 0,
// Replica.MonitorEnabled = false): the Replicator ships every
// Options.Interval (1 s), and on Flush and Close. A ship is
//
//  1. under Options.Gate: litestream's DB.Sync, which copies the new WAL
//     frames into local LTX files (in .NAME-litestream beside the
//     database) and checkpoints when its thresholds say so. The server's
//     gate first drains the chunk uploads the database references, then
//     holds the store's writer (vfs.Store.Exclusive, which commits the
//     open group first), so the frames copied reference only chunks in
//     the bucket and no commit lands meanwhile;
//  2. after the gate: Replica.Sync, which uploads every level-0 LTX file
//     the bucket lacks.
//
// Every LTX file is made by a DB.Sync under a gate, and litestream's
// compactions and snapshots (its Store: level 1 every 30 s, level 2 every
// 10 min, a snapshot a day, level-0 retention) read only LTX files and the
// database up to the last copied WAL offset, which no checkpoint passes:
// nothing committed after a gate released reaches the bucket before a
// later gate covers it (TestGateCoversWhatShips). litestream's own Close
// copies the WAL once more, so it runs under the gate too; if the gate
// will not run it, litestream closes with uploads refused and its local
// state is marked foreign, so that copy is dropped at the next Start.
//
// The gate's step is local work except at a Replicator's first ship,
// when litestream opens the database and lists the bucket (bounded by
// 10 s). A bucket that hangs or refuses delays only step 2: local
// commits go on at local speed (TestOutage), and the next ship uploads
// the backlog.
//
// # Lag
//
// Lag is 0 when the bucket holds every commit: the last ship succeeded
// and PRAGMA data_version (on a connection of the Replicator's) has not
// changed since that ship left the gate. Otherwise it is the time since
// the gate of the last successful ship, or since the last check that
// found nothing committed after it (each interval and each call),
// whichever is later: an upper bound on the age of the oldest commit not
// in the bucket, at most about Interval above it while the bucket
// answers. Once fenced it never returns to 0. Status adds litestream's
// positions (TXID in the bucket, TXID copied locally), the last error,
// and counts; metrics.go has the Prometheus series (ships by result,
// ship and gate durations); the server reports lag per workspace.
//
// # Generations and local state
//
// Litestream keeps its position in the LTX files beside the database. A
// Replicator started for another generation (or prefix) than the one
// that state was made for (the file wsync-replica in it says) removes it
// first, so the new generation begins with a snapshot of the whole
// database. A new owner calls Flush after Start and before it serves
// writes, so its generation holds a snapshot before any commit of its
// own: from then on no restore falls back past it.
//
// # Restore
//
// Restore(ctx, store, prefix, upTo, dbPath) lists the generations
// (objstore.Dirs), takes the newest <= upTo, and restores it with
// litestream into a temporary directory beside dbPath, runs quick_check,
// and links the file into place (a link never replaces a file, so an
// existing dbPath is refused, before and after). A generation with no
// restorable data (litestream's ErrTxNotAvailable or ErrNoSnapshots) is
// skipped for the next older one; any other failure fails the restore
// rather than fall back past data that may exist. ErrNoReplica when no
// generation qualifies.
//
// # Limits
//
// Litestream's S3 client builds its own HTTP client, which the AWS SDK
// cannot give the roots of AWS_CA_BUNDLE: with that variable set, Start
// fails and says so; Go's SSL_CERT_FILE works instead. Full-size chunk
// files live beside the database, not in it: they reach the bucket by the
// chunk uploads the server's gate drains, not through this package.
// Old generations are not deleted here.
package replica
