package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestServeObjectStoreFlags: serve refuses bad object-store flags with a
// usage error naming the flag, before it reaches the store.
func TestServeObjectStoreFlags(t *testing.T) {
	store := "s3://wsync/p?endpoint=http://127.0.0.1:9"
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--object-store", "http://not-s3/"}, "--object-store"},
		{[]string{"--object-store", store, "--lease-ttl", "500ms"}, "--lease-ttl"},
		{[]string{"--object-store", store, "--replicate-every", "0s"}, "--replicate-every"},
		{[]string{"--object-store", store, "--replicate-every", "30s", "--lease-ttl", "10s"}, "--replicate-every"},
		{[]string{"--object-store", store, "--chunk-gc-every", "-1h"}, "--chunk-gc-every"},
		{[]string{"--object-store", store, "--chunk-gc-every", "often"}, "--chunk-gc-every"},
		{[]string{"--object-store", store, "--chunk-gc-grace", "0s"}, "--chunk-gc-grace"},
		{[]string{"--object-store", store, "--chunk-gc-grace", "2s", "--replicate-every", "1s"}, "--chunk-gc-grace"},
		{[]string{"--object-store", store, "--listen", "0.0.0.0:0"}, "--advertise"},
		{[]string{"--object-store", store, "--advertise", "ftp://x"}, "--advertise"},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--computerd", "ws://127.0.0.1:9/sync"}, c.args...)
		var out, errb bytes.Buffer
		code := run(t.Context(), args, strings.NewReader(""), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.says) {
			t.Errorf("%v: exit %d %q, want a usage error naming %s", c.args, code, errb.String(), c.says)
		}
	}
}
