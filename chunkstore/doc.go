// Package chunkstore keeps file contents as chunks: fixed 512 KiB windows
// (the last one shorter) addressed by the sha256 of their bytes, each stored
// once however many files use it. A file is a Manifest, the ordered list of
// its chunks' Refs (hash and size); vfs keeps manifests in its node rows and
// asks this package for the bytes.
//
// # Holes
//
// A Ref whose Hash is HoleHash (all zeros, the address of no chunk) is a
// hole: Size bytes of zeros with nothing stored. A hole ref covers a run of
// whole chunks, up to MaxHoleRun, or the file's tail, so a manifest maps
// chunk indices to refs through Index rather than by position; a file is
// at most MaxFileSize (4 TiB). AddRefs, DropRefs and GC never see holes,
// Has reports HoleHash present (there is nothing to fetch), ReadAt fills
// zeros; callers collect what to probe, fetch or send with
// Manifest.Hashes or DataRefs. The manifest encoding is the same with or
// without holes.
//
// # Layout
//
// The chunk metadata is one table, chunks, in the caller's SQLite database
// (Migrations create it): hash, size, reference count, and for small chunks the
// bytes themselves. Chunks larger than the inline threshold and smaller than
// ChunkSize are records appended to pack files, Dir/packs/<id>.pack (a
// 40-byte header of magic, length and hash, then the bytes); their row names
// the record by (pack, pack_off). Full-size chunks live as content-addressed
// files, Dir/ab/abcd...(64 hex digits); their row has NULL data and no pack.
// A Store appends only to a pack it created, so a record is never rewritten;
// appends reserve their offset under a lock and write outside it. A Store
// with no Dir (a :memory: database) keeps every chunk as a row. The Store
// holds no database handle: every method that touches rows takes the
// caller's Querier, its write transaction when inside one, its reader
// *sql.DB otherwise. The table's layout changes by numbered steps,
// Migrations, which the caller runs as steps of its own schema versions
// (Schema runs them on a database that holds only the chunk table).
//
// # Read-ahead
//
// Prefetch reads the rows of chunks a reader expects to read soon, one
// query per 256: pack locations join the locations reads remember, inline
// bytes wait in a small content-addressed cache (4 MiB, oldest out first),
// where every read of them finds them. What it keeps is never stale: a
// hash's bytes do not change. ahead.go.
//
// Span gives a reader that copies bytes itself (the mount's READ reply,
// which the kernel splices from a file) where part of a full chunk lies
// in its chunk file, held open until it releases the span: the file's
// bytes are the chunk's for as long as it is open, past an unlink too.
//
// # Durability ordering
//
// Bytes are durable before any transaction names them. Stage.Put appends a
// pack record (or writes a full chunk to a temp file, fsyncs it and renames
// it into place); AddRefs, inserting the rows inside the caller's
// transaction, first fsyncs each pack it names that has appends since its
// last fsync (once per pack, not per chunk) and the directories holding new
// chunk files, so the bytes and names are durable before that transaction
// can commit. An inline chunk's bytes go into its row in that same
// transaction. A crash in between leaves only records no row names (dead
// space in their pack), files without rows and perhaps a temp file, which
// GC reclaims. NoSync drops the fsyncs, for tmpfs and tests.
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
// # Live collection
//
// GC does everything in one transaction: what a store runs when it opens.
// A running store collects with a Collection instead, in Steps, each in a
// write transaction of its own that deletes at most MaxChunks unreferenced
// rows (in id order, from a cursor), checks at most MaxChunks released
// files and, once the rows are done, moves at most MaxChunks records of
// the packs Plan found mostly dead; the caller finishes each step's Sweep
// after its commit. Plan counts packs' referenced bytes on a reader, outside
// the writer; a step checks again what it acts on (a pack is dropped only
// when no row names it inside the step's transaction). DropRefs counts the
// bytes of rows left unreferenced (DroppedBytes, Dropped) so a caller can
// start a pass after enough was dropped.
//
// Why a live step never collects a chunk that is needed:
//
//   - Referenced: a step deletes only rows with refs <= 0 as read inside
//     its own write transaction, and writers serialise with it, so no
//     commit lands between the read and the delete.
//   - Staged: a step skips pinned hashes under the store's lock; Put pins
//     before writing bytes, and Finish checks the pins again, per file,
//     under the lock, before each unlink.
//   - Dropped to zero, then referenced again before the step: the AddRefs
//     of that commit raised refs above zero in a committed transaction the
//     step reads; the row is not a victim.
//   - Referenced again after the step committed (the row is gone): the
//     new commit's AddRefs needs the bytes; they come from its stage (a
//     pinned chunk: file and pack bytes were written before the pin could
//     go, inline bytes are held by the pin), or, for a file or record no
//     stage holds, AddRefs takes the hash or pack off the pending sweep
//     before it checks the bytes, so Finish cannot remove them under it. If
//     Finish removed them first, AddRefs fails with ErrUnknownHash and the
//     transaction rolls back: nothing refers to missing bytes.
//   - Needed outside any transaction: the caller's Keep (vfs passes the
//     committed manifests of open files, read under their locks inside
//     the step's transaction) and the grace: rows that lost their last
//     reference, or that Has reported present while unreferenced, less
//     than Grace ago are skipped, so a reader between a manifest and its
//     chunks, or a peer between its probe and its apply, finds them.
//   - Compaction: a moved record's copy is fsynced before the step
//     commits; the old pack stays until Finish, after the commit, and a
//     reader that already found the old location reads the old pack.
//
// A SIGKILL anywhere leaves committed rows that name durable bytes (the
// step's transaction either committed or not) plus, at worst, files and
// packs no row names, which the GC at open removes.
//
// Packs: GC counts each sealed pack's live bytes from its rows; the rest of
// the file is dead (deleted rows, appends never committed, superseded
// copies). A sealed pack with no live row is deleted at Finish; one more
// than half dead is compacted: its live records are copied into the current
// pack and their rows repointed inside the GC's transaction (the copies
// fsynced first), and the old pack is deleted at Finish. The current pack
// and packs holding records a live stage pins are never touched. A reader
// that found a record just before a compaction committed and then finds its
// pack gone looks the row up once more; one that already holds the pack's
// descriptor reads the unlinked file. A location cache (hash to record)
// spares the FUSE read path its SQL; an entry can only go stale by naming a
// deleted pack, which the read notices. A sender streaming chunks reads
// them with GetEach: the rows of those not cached are looked up 256 to a
// query, and a record found gone sends that chunk through Get's retry.
//
// Has treats a row whose bytes are missing or short (a file deleted or
// truncated from outside, a pack shorter than the record's end) as absent,
// so a sync peer ships the chunk again; the new stage's copy is found by
// reads and Has, and AddRefs repoints the row at it. Reads of a damaged
// chunk fail with ErrCorrupt.
//
// # Why the threshold
//
// Blob bytes through modernc SQLite cost 3.5-5 us per KiB; a chunk file
// costs a fixed 20 us on tmpfs and about 1 ms on disk once fsynced, plus
// well under 1 us per KiB. Reading a row costs a query and a walk of its
// overflow pages where a file read is one pread on a cached descriptor
// (64 us against 4 us for 64 KiB). Against one file per chunk, rows won
// writes up to 128 KiB when every file paid its own fsync. Packs pay one
// fsync per pack per commit and beat rows from a few KiB (8 KiB: 25 us
// against 53 us on disk with fsync), and read faster at every size, so
// DefaultInlineMax is 4 KiB with or without fsync: rows hold tiny files
// only. End to end, a pull of 10,000 files of 10 KB on disk went from 900
// to 630 ms with the move. docs/PERFORMANCE.md has the figures;
// bench_test.go reproduces them.
package chunkstore
