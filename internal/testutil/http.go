package testutil

import (
	"io"
	"net/http"
	"testing"
)

// Request sends an HTTP request with the Authorization header auth (none
// when empty) and any more headers as name, value pairs, and returns the
// response's status, body and header.
func Request(t testing.TB, method, url, auth string, body io.Reader, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}
