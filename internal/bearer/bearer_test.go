package bearer

import (
	"net/http"
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
