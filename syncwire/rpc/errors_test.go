package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Test sentinels, standing for a domain package's (vfs.ErrNotExist): they
// cross the wire under the codes registered for them, in this order.
var (
	errTestMissing = errors.New("test: missing")
	errTestOther   = errors.New("test: other")
	errTestAlias   = errors.New("test: closed")
	errTestMatched = errors.New("test: matched by message")
)

const (
	codeTestMissing Code = 1001
	codeTestOther   Code = 1002
)

func init() {
	RegisterCode(codeTestMissing, "ETEST_MISSING", errTestMissing)
	RegisterCode(codeTestOther, "ETEST_OTHER", errTestOther)
	RegisterAlias(CodeShutdown, errTestAlias)
	RegisterMatch(codeTestMissing, func(err error) bool { return errors.Is(err, errTestMatched) })
}

func TestRegisteredSentinelRoundTrips(t *testing.T) {
	err := fmt.Errorf("open a/b: %w", errTestMissing)
	if got := CodeOf(err); got != codeTestMissing {
		t.Fatalf("CodeOf = %v, want ETEST_MISSING", got)
	}
	if got, want := codeTestMissing.String(), "ETEST_MISSING"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	re := &RemoteError{Code: CodeOf(err), Msg: err.Error()}
	if !errors.Is(re, errTestMissing) || errors.Is(re, errTestOther) {
		t.Errorf("%v: unwraps to %v, want errTestMissing", re, errors.Unwrap(re))
	}
	if got := CodeOf(fmt.Errorf("again: %w", re)); got != codeTestMissing {
		t.Errorf("a relayed RemoteError is %v, want its own code", got)
	}
	if !errors.Is(&RemoteError{Code: 999}, ErrUnknown) || Code(999).String() != "E999" {
		t.Error("an unregistered code is not ErrUnknown named E999")
	}
}

func TestRegisterCodeRefusesDuplicates(t *testing.T) {
	for name, register := range map[string]func(){
		"code of rpc":        func() { RegisterCode(CodeProtocol, "ETEST_DUP", errors.New("dup")) },
		"registered code":    func() { RegisterCode(codeTestMissing, "ETEST_DUP", errors.New("dup")) },
		"name of rpc":        func() { RegisterCode(1003, "EPROTOCOL", errors.New("dup")) },
		"registered name":    func() { RegisterCode(1003, "ETEST_MISSING", errors.New("dup")) },
		"alias unregistered": func() { RegisterAlias(1004, errors.New("dup")) },
		"match unregistered": func() { RegisterMatch(1004, func(error) bool { return true }) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			register()
		})
	}
	if got := Code(1003).String(); got != "E1003" {
		t.Errorf("a refused registration left %s behind", got)
	}
}

// errBoth matches two sentinels, as a protocol error about a bad path
// matches ErrProtocol and vfs.ErrInvalid.
type errBoth struct{ a, b error }

func (e errBoth) Error() string   { return e.a.Error() + ": " + e.b.Error() }
func (e errBoth) Unwrap() []error { return []error{e.a, e.b} }

func TestCodePrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Code
	}{
		{"rpc's rows before registered ones", errBoth{errTestMissing, ErrProtocol}, CodeProtocol},
		{"registered rows in registration order", errBoth{errTestOther, errTestMissing}, codeTestMissing},
		{"registered rows before the context rows", errBoth{context.Canceled, errTestOther}, codeTestOther},
		{"alias at its row's place", errBoth{errTestMissing, errTestAlias}, CodeShutdown},
		{"matchers last", errBoth{errTestMatched, errTestOther}, codeTestOther},
		{"matcher", fmt.Errorf("disk: %w", errTestMatched), codeTestMissing},
		{"no match", errors.New("plain"), CodeUnknown},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("%s: CodeOf(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
