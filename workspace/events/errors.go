package events

import "errors"

// ErrBadID: an event id (a Last-Event-ID, an ?after= value) that is not of
// the form this package writes.
var ErrBadID = errors.New("bad event id")

// ErrBadFilter: a type filter that names no known event type.
var ErrBadFilter = errors.New("bad event type filter")
