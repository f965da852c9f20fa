// Package objstore is the server's view of an S3-compatible object store:
// a bucket and a key prefix, addressed by a URL
// (s3://bucket/prefix?endpoint=http://127.0.0.1:7070&region=us-east-1),
// with credentials read from the environment the way the AWS SDK reads
// them (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, profiles).
//
// It offers the few operations the scale-out layer needs, each on a key
// relative to the prefix: Get, Head, Put, the two conditional writes
// (PutIfAbsent, PutIfMatch: S3's If-None-Match: * and If-Match: etag, which
// fail with ErrPrecondition when another writer won), Delete and List. The
// conditional writes are what leases are built on (package lease); a store
// that ignores the headers would break them, so Open's caller can run
// CheckConditional once against the store to refuse such a store at start.
//
// Every key is checked (no empty segment, no "." or "..", no control
// byte), so a caller's value can never address outside the prefix.
package objstore
