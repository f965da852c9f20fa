// Package chunkstore keeps file contents as chunks: fixed 512 KiB windows
// (the last one shorter) addressed by the sha256 of their bytes, each stored
// once however many files use it. A file is a Manifest, the ordered list of
// its chunks' Refs (hash and size); vfs keeps manifests in its node rows and
// asks this package for the bytes.
//
// # Layout
//
// The chunk metadata is one table, chunks, in the caller's SQLite database
// (Schema creates it): hash, size, reference count, and for small chunks the
// bytes themselves. Chunks larger than the inline threshold live outside
// SQLite's pages as content-addressed files, Dir/ab/abcd...(64 hex digits),
// and their row's data is NULL. A Store with no Dir (a :memory: database)
// keeps every chunk as a row. The Store holds no database handle: every
// method that touches rows takes the caller's Querier, its write
// transaction when inside one, its reader *sql.DB otherwise.
//
// # Durability ordering
//
// Bytes are durable before any transaction names them. Stage.Put writes a
// file chunk to a temp file, fsyncs it and renames it into place; AddRefs,
// inserting the row inside the caller's transaction, first fsyncs the
// directories holding new chunk files (once per directory, not per chunk),
// so the names are durable before that transaction can commit. An inline
// chunk's bytes go into its row in that same transaction. A crash in between leaves only files without rows (and
// perhaps a temp file), which the first GC after reopening removes; a file
// name in the layout always has complete bytes behind it. NoSync drops the
// fsyncs, for tmpfs and tests.
//
// # Staging and pins
//
// A Stage holds the chunks of one upcoming commit: received from the wire
// for an apply, or filled by a write handle. Put verifies the hash (PutHashed
// computes it, once, on the write path). File chunks are written at once;
// inline chunks are copied into a store-wide pending map until AddRefs puts
// them into rows. Everything a live stage holds is pinned: Has reports it,
// reads find it, and GC leaves its rows and files alone. Release drops the
// pins, freeing inline bytes that no other stage holds. A rolled-back
// transaction therefore loses nothing: the stage still has the bytes for a
// retry.
//
// # Reference counting and collection
//
// Each row counts the manifest entries that name it: AddRefs when a manifest
// is committed (a hash twice in one file counts twice), DropRefs when it is
// replaced or deleted, both inside the transaction that changes the
// manifest. GC, inside a write transaction, deletes the rows that nothing
// references and nothing pins, and returns a Sweep; after the commit,
// Sweep.Finish unlinks their files, plus orphan files that have no row (from
// a crash, or a stage released without a commit) and stale temp files.
// Finish checks each hash against the pins under the store's lock, and
// AddRefs takes a hash out of the pending sweep before it checks the file,
// so a chunk staged or referenced between GC and Finish keeps its bytes.
// If the GC's transaction rolls back, the caller never calls Finish and the
// next GC covers the same ground.
//
// Has treats a row whose bytes are missing or short (a file deleted or
// truncated from outside) as absent, so a sync peer ships the chunk again
// and the new stage repairs the file; reads of such a chunk fail with
// ErrCorrupt.
//
// # Why the threshold
//
// Blob bytes through modernc SQLite cost 3.5-5 us per KiB; a chunk file
// costs a fixed 20 us on tmpfs and about 1 ms on disk once fsynced, plus
// well under 1 us per KiB. Reading a row costs a query and a walk of its
// overflow pages where a file read is one pread on a cached descriptor
// (64 us against 4 us for 64 KiB). With fsync, rows win writes up to
// 128 KiB and tie at 256 KiB, but reads degrade past 64 KiB: hence
// DefaultInlineMax = 64 KiB. Without fsync files win from about 8 KiB
// (DefaultInlineMaxNoSync). docs/PERFORMANCE.md has the figures;
// bench_test.go reproduces them.
package chunkstore
