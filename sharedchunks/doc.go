// Package sharedchunks keeps chunk bytes in an object store, shared by
// every workspace and server on the bucket: it is the chunkstore.Remote of
// a store served under serve --object-store, and its collector.
//
// # Layout
//
// A chunk's bytes are the object chunks/<h[0:2]>/<h> (h its sha256 in
// hex), written once whatever the number of workspaces holding the same
// content: an upload of a chunk of 64 KiB or more asks first (HEAD) and
// sends only what the bucket lacks (chunkstore.Store.Upload); a smaller
// one is sent again. chunks-trash/<h[0:2]>/<h> holds bytes the collector set aside;
// a read that misses chunks/ looks there and puts what it finds back.
//
// # Collection: mark, grace, sweep
//
// The collector (Collect) runs under a lease of its own, so one at a
// time. A run reads the bucket's clock M (the modification time of an
// object it writes), then takes the marks: every chunk the newest replica
// of each workspace references. It then
//
//  1. moves to the trash each chunks/ object that no mark names and that
//     was written before M - grace;
//  2. puts back each trash object a mark names;
//  3. deletes each trash object no mark names that was moved there
//     before M - grace.
//
// The argument that no chunk a workspace can still name is ever deleted
// is in docs/ARCHITECTURE.md ("Scaling out"). In short: bytes leave
// chunks/ only for the trash, and a reader finds them there; they leave
// the trash only when a mark taken grace after the move still does not
// name them; and a writer that relied on bytes it found in chunks/ gets
// the commit naming them into its replica within grace/2 of finding them
// (the replication gate verifies them again otherwise), so that mark
// names them.
package sharedchunks
