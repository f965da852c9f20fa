package execrun

import (
	"bytes"
	"testing"
)

func TestOutputLogKeepsNewestBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cap    int64
		writes []string
		want   string // retained bytes
	}{
		{"under cap", 10, []string{"abc", "def"}, "abcdef"},
		{"exactly cap", 6, []string{"abc", "def"}, "abcdef"},
		{"drops whole chunk", 3, []string{"abc", "def"}, "def"},
		{"trims front chunk", 4, []string{"abc", "def"}, "cdef"},
		{"one write over cap", 2, []string{"abcdef"}, "ef"},
		{"many small writes", 5, []string{"a", "b", "c", "d", "e", "f", "g"}, "cdefg"},
	} {
		l := outputLog{cap: tc.cap}
		var total int64
		for i, w := range tc.writes {
			l.append(Stream(1+i%2), []byte(w))
			total += int64(len(w))
		}
		var got []byte
		for off := l.start; off < l.end; {
			_, data := l.at(off)
			got = append(got, data...)
			off += int64(len(data))
		}
		if !bytes.Equal(got, []byte(tc.want)) || l.end != total || l.end-l.start != int64(len(tc.want)) {
			t.Errorf("%s: retained %q [%d, %d), want %q ending at %d", tc.name, got, l.start, l.end, tc.want, total)
		}
	}
}

func TestOutputLogCompacts(t *testing.T) {
	l := outputLog{cap: 10}
	for range 10000 {
		l.append(Stdout, []byte("x"))
	}
	if len(l.chunks) > 200 {
		t.Errorf("%d chunk slots for 10 live chunks", len(l.chunks))
	}
	if _, data := l.at(l.end - 1); string(data) != "x" {
		t.Errorf("last byte %q", data)
	}
}
