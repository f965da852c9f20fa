// Package events is the event log of one workspace: a bounded, replayable,
// in-memory log of what happens in it (syncs and their progress, commands,
// pending pulls, conflicts, verify verdicts, runtimes coming and going),
// which the HTTP API serves as Server-Sent Events. The package knows no
// workspace: package workspace publishes into a Log and names the types.
//
// # Events and ids
//
// An Event has an id, a time, a type ("sync.progress"), the runtime it
// concerns (if any) and a JSON payload, encoded once when it is published,
// so a thousand subscribers share one encoding. Ids are "EPOCH-SEQ": the
// log's epoch, 8 random hex digits drawn when the log is made (so at every
// server start), and a sequence number from 1 with no holes. An id is
// therefore never confused across a restart: a subscriber that comes back
// with an id of another epoch is told there was a gap (reason "restart")
// and gets everything the new log retains.
//
// # Retention
//
// The log keeps the newest events within three bounds: DefaultMaxEvents
// (10,000) events, DefaultMaxAge (1 hour) and DefaultMaxBytes (16 MiB) of
// encodings, each event at most MaxEventBytes (64 KiB; a larger payload is
// replaced by a note of its size). Events are dropped oldest first when
// one is published (age also when a subscription starts). Memory is
// bounded by these, never by the subscribers.
//
// # Subscribers
//
// A Subscription reads from an id onwards at its own pace, like execrun's
// output subscriptions: the log is the only buffer, so Publish never
// waits for a subscriber and a subscriber that does not read costs
// nothing but its position. Publish wakes the waiting subscribers through
// one channel. A subscriber whose next event has been dropped is never
// moved past it silently: Next returns a gap event (TypeGap, data Gap:
// the id read last, the oldest id retained, how many were missed) and
// goes on from the oldest retained. A gap event has no id, so an SSE
// client's Last-Event-ID stays at the last event it really got.
//
// # Filters
//
// A Filter selects types by name or by family ("sync" selects every
// "sync.*"); gap events pass every filter. ParseFilter refuses an entry
// that names no known type.
package events
