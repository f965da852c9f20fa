package main

import (
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"10GiB", 10 << 30, true},
		{"10G", 10 << 30, true},
		{"512MB", 512 << 20, true},
		{"4k", 4 << 10, true},
		{"1000", 1000, true},
		{"1T", 1 << 40, true},
		{"-1", -1, true},
		{"0", 0, false},
		{"-5", 0, false},
		{"GiB", 0, false},
		{"1.5G", 0, false},
		{"9999999999999T", 0, false},
		{"", 0, false},
	} {
		got, err := parseBytes(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"", time.Time{}, true},
		{"10m", now.Add(-10 * time.Minute), true},
		{"2026-12-02T14:04:05Z", time.Date(2026, 12, 2, 14, 4, 5, 0, time.UTC), true},
		{"2026-12-02T14:04:05.123456789Z", time.Date(2026, 12, 2, 14, 4, 5, 123456789, time.UTC), true},
		{"-10m", time.Time{}, false},
		{"yesterday", time.Time{}, false},
	} {
		got, err := parseWhen(c.in, now)
		if (err == nil) != c.ok || !got.Equal(c.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
