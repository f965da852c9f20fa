package api

import (
	"strconv"
	"testing"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"644", 0o644, true}, {"0755", 0o755, true}, {"4755", 0o4755, true}, {"0", 0, true},
		{"7777", 0o7777, true}, {"10000", 0, false}, {"8", 0, false}, {"rw", 0, false}, {"", 0, false}, {"-1", 0, false},
	} {
		got, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMode(%q) = %o, %v; want %o ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"644", "0755", "99", "", "0x1ff", "07777", "17777"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err != nil {
			return
		}
		if m > 0o7777 {
			t.Fatalf("ParseMode(%q) = %o: outside 07777", s, m)
		}
		if back, err := ParseMode(strconv.FormatUint(uint64(m), 8)); err != nil || back != m {
			t.Fatalf("round trip %o: %o %v", m, back, err)
		}
	})
}
