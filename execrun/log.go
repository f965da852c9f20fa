package execrun

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// Stream tags which output an event's bytes came from.
type Stream uint8

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("stream(%d)", uint8(s))
}

// Event is one piece of an exec's output, or its end.
//
// Offset counts the bytes of both streams together, in the order the runner
// read them: an output event holds bytes [Offset, Offset+len(Data)). The
// final event has Exit set, no Data, and Offset at the end of the output.
// Data is shared with the log and must not be modified.
type Event struct {
	Offset int64
	Stream Stream
	Data   []byte
	Exit   *ExitStatus
}

// chunk is one read from a pipe, immutable once logged.
type chunk struct {
	off    int64
	stream Stream
	data   []byte
}

// outputLog keeps the newest cap bytes of an exec's output. Guarded by the
// owning Exec's mutex.
type outputLog struct {
	cap    int64
	chunks []chunk // live chunks are chunks[head:]
	head   int
	start  int64 // offset of the oldest retained byte
	end    int64 // offset just past the newest byte
}

func (l *outputLog) append(s Stream, data []byte) {
	l.chunks = append(l.chunks, chunk{off: l.end, stream: s, data: data})
	l.end += int64(len(data))
	for l.end-l.start > l.cap {
		c := &l.chunks[l.head]
		excess := l.end - l.start - l.cap
		if n := int64(len(c.data)); n <= excess {
			l.start += n
			*c = chunk{}
			l.head++
			continue
		}
		c.data = c.data[excess:]
		c.off += excess
		l.start += excess
	}
	if l.head > 64 && l.head > len(l.chunks)/2 {
		n := copy(l.chunks, l.chunks[l.head:])
		clear(l.chunks[n:])
		l.chunks = l.chunks[:n]
		l.head = 0
	}
}

// at returns the bytes at off up to the end of the chunk holding it. The
// caller checks start <= off < end.
func (l *outputLog) at(off int64) (Stream, []byte) {
	live := l.chunks[l.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].off+int64(len(live[i].data)) > off })
	c := live[i]
	return c.stream, c.data[off-c.off:]
}

// Subscription reads one exec's events from an offset at its own pace: the
// log is the buffer, so a slow reader holds up nobody, but one that falls
// more than the log's cap behind gets ErrLogTruncated. It holds no resources
// and needs no closing.
type Subscription struct {
	e        *Exec
	off      int64
	exitSent bool
}

// Offset is the offset of the next output byte Next will return.
func (s *Subscription) Offset() int64 { return s.off }

// SkipLost moves a subscription that fell behind the log (Next answered a
// *TruncatedError) on to the oldest byte the log still holds, and returns
// how many bytes it skipped (0 when it had not fallen behind). The next
// event's Offset is then past the end of the last one: the gap is what was
// lost.
func (s *Subscription) SkipLost() int64 {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.out.start - s.off
	if n <= 0 {
		return 0
	}
	s.off = e.out.start
	metricOutputSkipped.Add(float64(n))
	return n
}

// Next blocks until there is output at the subscription's offset or the exec
// has ended. After the output it returns the exit event once, then io.EOF.
// A *TruncatedError (ErrLogTruncated) means the reader fell behind the cap.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	e := s.e
	for {
		e.mu.Lock()
		l := &e.out
		switch {
		case s.off < l.start:
			e.mu.Unlock()
			return Event{}, &TruncatedError{ID: e.id, Offset: s.off, Start: l.start}
		case s.off < l.end:
			stream, data := l.at(s.off)
			ev := Event{Offset: s.off, Stream: stream, Data: data}
			s.off += int64(len(data))
			e.mu.Unlock()
			return ev, nil
		case e.exit != nil:
			st := *e.exit
			e.mu.Unlock()
			if s.exitSent {
				return Event{}, io.EOF
			}
			s.exitSent = true
			return Event{Offset: s.off, Exit: &st}, nil
		}
		if e.wake == nil {
			e.wake = make(chan struct{})
		}
		wake := e.wake
		e.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}
