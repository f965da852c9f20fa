package bearer

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tok := New("s3cret")
	for _, tt := range []struct {
		header string
		want   bool
	}{
		{"Bearer s3cret", true},
		{"bearer s3cret", true},
		{"Bearer  s3cret ", true},
		{"Bearer s3cre", false},
		{"Bearer s3crett", false},
		{"Basic s3cret", false},
		{"s3cret", false},
		{"", false},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		if got := tok.Check(r); got != tt.want {
			t.Errorf("Check(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
	r, _ := http.NewRequest("GET", "/", nil)
	if !New("").Check(r) || !New("").Open() {
		t.Error("an empty token must accept every request")
	}
}

func TestReadFileRefusesAnEmptyToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	blank := filepath.Join(dir, "blank")
	if err := os.WriteFile(good, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blank, []byte(" \n\t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(good); err != nil || got != "s3cret" {
		t.Errorf("ReadFile(good) = %q, %v", got, err)
	}
	if _, err := ReadFile(blank); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("ReadFile(blank) = %v, want an 'is empty' error", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}
