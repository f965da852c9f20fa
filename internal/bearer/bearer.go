// Package bearer checks "Authorization: Bearer <token>" headers the one
// way every wsync endpoint does: the token's digest compared in constant
// time, so neither the token nor its length leaks through timing. Tokens
// are never logged.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// ReadFile reads a token from a file an operator or user named: its
// content, surrounding white space trimmed. An empty file is an error,
// never "no authentication": a truncated secret must not open a daemon.
func ReadFile(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return tok, nil
}

// Token is an expected bearer token, kept as its digest.
type Token struct {
	sum [32]byte
	set bool
}

// New returns the expected token; an empty token accepts every request.
func New(token string) Token {
	if token == "" {
		return Token{}
	}
	return Token{sum: sha256.Sum256([]byte(token)), set: true}
}

// Open reports whether the token is empty (no authentication).
func (t Token) Open() bool { return !t.set }

// Check reports whether r carries the token.
func (t Token) Check(r *http.Request) bool {
	if !t.set {
		return true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], t.sum[:]) == 1
}
