package watermark

import (
	"errors"
	"slices"
	"testing"
)

func TestCursorOrdering(t *testing.T) {
	tests := []struct {
		a, b Cursor
		want int
	}{
		{At(1), At(2), -1},
		{At(2), At(2), 0},
		{Within(2, "a"), At(2), -1},          // a partial cursor sorts before the full cursor of its rev
		{Within(2, "zzz"), At(1), 1},         // rev dominates path
		{Within(2, "a"), Within(2, "b"), -1}, // paths order within a rev
		{Within(2, "b"), Within(2, "b"), 0},
		{Within(2, ""), Within(2, "a"), -1},
		{At(1), Within(2, ""), -1},
	}
	for _, tt := range tests {
		if got := tt.a.Compare(tt.b); got != tt.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := tt.b.Compare(tt.a); got != -tt.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestCursorAdmits(t *testing.T) {
	c := Within(5, "m")
	if c.Admits(5, "a") || c.Admits(5, "m") || c.Admits(4, "z") {
		t.Error("cursor admits an entry at or before itself")
	}
	if !c.Admits(5, "n") || !c.Admits(6, "a") {
		t.Error("cursor refuses an entry after itself")
	}
	if At(5).Admits(5, "zzz") {
		t.Error("full cursor admits an entry of its own rev")
	}
}

func TestCursorEncodingRoundTrip(t *testing.T) {
	for _, c := range []Cursor{At(0), At(1 << 40), Within(7, ""), Within(7, "src/a b/ü.go")} {
		b, err := c.AppendBinary([]byte{0xAA})
		if err != nil {
			t.Fatal(err)
		}
		got, rest, err := DecodeCursor(b[1:])
		if err != nil {
			t.Fatalf("decode %v: %v", c, err)
		}
		if got != c || len(rest) != 0 {
			t.Errorf("round trip %v = %v (rest %d)", c, got, len(rest))
		}
	}
}

func TestDecodeCursorRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0x01}, {0x01, 0x02}, {0x01, 0x01, 0x05, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}} {
		if _, _, err := DecodeCursor(b); !errors.Is(err, ErrBadCursor) {
			t.Errorf("DecodeCursor(%x) err = %v, want ErrBadCursor", b, err)
		}
	}
}

func TestSortedCursors(t *testing.T) {
	got := []Cursor{At(3), Within(3, "b"), At(1), Within(3, "a"), Within(1, "x")}
	slices.SortFunc(got, Cursor.Compare)
	want := []Cursor{Within(1, "x"), At(1), Within(3, "a"), Within(3, "b"), At(3)}
	if !slices.Equal(got, want) {
		t.Errorf("sorted = %v, want %v", got, want)
	}
}

func TestCheckInvariant(t *testing.T) {
	ours := Set{Push: At(10)}
	if err := CheckInvariant("c", ours, At(10)); err != nil {
		t.Errorf("equal cursors: %v", err)
	}
	if err := CheckInvariant("c", ours, At(12)); err != nil {
		t.Errorf("peer ahead: %v", err)
	}
	err := CheckInvariant("c", ours, At(0))
	var ie *InvariantError
	if !errors.Is(err, ErrInvariant) || !errors.As(err, &ie) || ie.PeerApplied != At(0) {
		t.Errorf("reset peer: err = %v, want InvariantError", err)
	}
	if err := CheckInvariant("c", Set{Push: Within(10, "m")}, Within(10, "m")); err != nil {
		t.Errorf("partial push cursor covered: %v", err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	for _, c := range []Cursor{At(0), At(99), Within(3, "a/b")} {
		b, _ := c.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, _, err := DecodeCursor(b)
		if err != nil {
			return
		}
		enc, err := c.AppendBinary(nil)
		if err != nil {
			t.Fatalf("decoded cursor %v does not encode: %v", c, err)
		}
		c2, _, err := DecodeCursor(enc)
		if err != nil || c2 != c {
			t.Fatalf("re-decode %v = %v, %v", c, c2, err)
		}
	})
}
