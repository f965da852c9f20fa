package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"10GiB", 10 << 30, true}, {"500MB", 500e6, true}, {"1048576", 1 << 20, true}, {"1.5 KiB", 1536, true},
		{"0", 0, true}, {"none", 0, true}, {"Unlimited", 0, true},
		{"-1", 0, false}, {"-5GiB", 0, false}, {"2EiB", 0, false}, {"ten", 0, false}, {"", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"200000", 200000, true}, {"unlimited", 0, true}, {"-3", 0, false}, {"1e3", 0, false}, {"99999999999999999999", 0, false}} {
		got, err := parseCount(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseCount(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestWorkspacesQuotaVerbs(t *testing.T) {
	c := newCLI(t, nil)
	t.Setenv("WSYNC_QUOTA_MAX_ENTRIES", "5000")
	c.ok("", "workspaces", "create", "proj", "--max-bytes", "10GiB", "--max-file-size", "1GiB")
	if r := c.run("", "workspaces", "create", "bad", "--max-bytes", "-1"); r.code != exitUsage {
		t.Errorf("create with a negative quota: exit %d, want %d", r.code, exitUsage)
	}
	if r := c.run("", "workspaces", "create", "bad", "--max-entries", "1099511627777"); r.code != exitUsage {
		t.Errorf("create past max entries' bound: exit %d, want %d\n%s", r.code, exitUsage, r.stderr)
	}
	if r := c.run("", "workspaces", "set-quota", "proj"); r.code != exitUsage {
		t.Errorf("set-quota without a flag: exit %d, want %d", r.code, exitUsage)
	}
	var info []workspace.Info
	if err := json.Unmarshal([]byte(c.ok("", "workspaces", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	want := vfs.Quota{MaxBytes: 10 << 30, MaxEntries: 5000, MaxFileSize: 1 << 30}
	for _, in := range info {
		if in.Name == "proj" && in.Quota != want {
			t.Fatalf("created with quota %+v, want %+v (the entries from the environment)", in.Quota, want)
		}
		if in.Name == "bad" {
			t.Error("a refused create made the workspace")
		}
	}
	// Only the flags given change; unlimited removes a bound.
	out := c.ok("", "workspaces", "set-quota", "proj", "--max-file-size", "unlimited", "--max-entries", "7")
	if !strings.Contains(out, "of 10 GiB") || !strings.Contains(out, "of 7") || strings.Contains(out, "max file size") {
		t.Errorf("set-quota printed %q", out)
	}
	var st workspace.QuotaStatus
	if err := json.Unmarshal([]byte(c.ok("", "workspaces", "set-quota", "proj", "--max-bytes", "1MiB", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Quota != (vfs.Quota{MaxBytes: 1 << 20, MaxEntries: 7}) {
		t.Errorf("quota %+v after two partial changes", st.Quota)
	}
	if out := c.ok("", "status", "--workspace", "proj"); !strings.Contains(out, "quota:      bytes 0 B of 1.0 MiB (0%), entries 0 of 7 (0%)") {
		t.Errorf("status does not show the quota:\n%s", out)
	}
}
