package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An empty token is refused, never read as "no auth" (issue 9 item 8): an
// empty --token-file, or COMPUTERD_TOKEN set to nothing, stops computerd
// before it mounts or listens.
func TestEmptyTokenRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  *string
		args []string
		want string
	}{
		{"empty token file", nil, []string{"--token-file", empty}, "is empty"},
		{"missing token file", nil, []string{"--token-file", filepath.Join(dir, "nope")}, "no such file"},
		{"empty env", ptr(""), nil, "COMPUTERD_TOKEN is set but empty"},
		{"blank env", ptr(" \t"), nil, "COMPUTERD_TOKEN is set but empty"},
		{"empty file wins over env", ptr("good"), []string{"--token-file", empty}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv("COMPUTERD_TOKEN", *tc.env)
			} else {
				t.Setenv("COMPUTERD_TOKEN", "")
				os.Unsetenv("COMPUTERD_TOKEN")
			}
			// A mount point and state that would work: the refusal must come
			// from the token alone.
			args := append([]string{"--listen", "127.0.0.1:0", "--mount", filepath.Join(t.TempDir(), "m"),
				"--state", ":memory:"}, tc.args...)
			// Before the fix computerd came up without auth and served until
			// ctx ended (exit 0).
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			if code := run(ctx, args, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q, want it to say %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestReadToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t")
	if err := os.WriteFile(file, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPUTERD_TOKEN", "from-env")
	if got, err := readToken(file); err != nil || got != "s3cret" {
		t.Fatalf("file: %q %v", got, err)
	}
	if got, err := readToken(""); err != nil || got != "from-env" {
		t.Fatalf("env: %q %v", got, err)
	}
	os.Unsetenv("COMPUTERD_TOKEN")
	if got, err := readToken(""); err != nil || got != "" {
		t.Fatalf("neither: %q %v, want no token (loopback only)", got, err)
	}
}

func ptr(s string) *string { return &s }

// --exec-retain-for (and COMPUTERD_EXEC_RETAIN_FOR) takes a positive
// duration; anything else is bad usage before anything starts.
func TestExecRetainForFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{[]string{"--exec-retain-for", "0s"}, ""},
		{[]string{"--exec-retain-for", "soon"}, ""},
		{nil, "-1h"},
	} {
		if tc.env != "" {
			t.Setenv("COMPUTERD_EXEC_RETAIN_FOR", tc.env)
		}
		var stderr bytes.Buffer
		args := append([]string{"--mount", filepath.Join(t.TempDir(), "m"), "--state", ":memory:"}, tc.args...)
		if code := run(context.Background(), args, &stderr); code != 2 || !strings.Contains(stderr.String(), "--exec-retain-for") {
			t.Errorf("%q env %q: exit %d, %q; want 2 naming --exec-retain-for", tc.args, tc.env, code, stderr.String())
		}
	}
}
