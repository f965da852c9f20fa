package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCodecRoundTrips(t *testing.T) {
	hash := bytes.Repeat([]byte{7}, 32)
	e := NewEncoder([]byte("prefix"))
	e.PutUvarint(300)
	e.PutVarint(-5)
	e.PutByte(9)
	e.PutString("héllo")
	e.PutBytes([]byte{1, 2})
	e.PutFixed(hash)
	e.PutFixed(hash)
	mark := e.Len()
	e.PutString("dropped")
	e.Truncate(mark)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	b := e.Bytes()
	if !bytes.HasPrefix(b, []byte("prefix")) {
		t.Fatalf("encoder did not append to its buffer: %q", b)
	}
	d := NewDecoder(b[len("prefix"):])
	if got := d.Uvarint(); got != 300 {
		t.Errorf("uvarint = %d", got)
	}
	if got := d.Varint(); got != -5 {
		t.Errorf("varint = %d", got)
	}
	if got := d.Byte(); got != 9 {
		t.Errorf("byte = %d", got)
	}
	if got := d.UTF8("greeting", 16); got != "héllo" {
		t.Errorf("string = %q", got)
	}
	if got := d.Bytes("blob", 2); !bytes.Equal(got, []byte{1, 2}) {
		t.Errorf("bytes = %v", got)
	}
	if got := d.Fixed(32); !bytes.Equal(got, hash) {
		t.Errorf("fixed = %v", got)
	}
	if got := d.Fixed32(); !bytes.Equal(got[:], hash) {
		t.Errorf("fixed32 = %v", got)
	}
	if err := d.Done(); err != nil {
		t.Errorf("done: %v", err)
	}
}

func TestEncoderFailureSticks(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	var e Encoder
	e.Append(func(b []byte) ([]byte, error) { return append(b, 1), first })
	e.Fail(second)
	e.Fail(nil)
	if got, want := e.Err(), first; got != want {
		t.Errorf("Err = %v, want %v", got, want)
	}
}

func TestDecoderRefusesBadInput(t *testing.T) {
	long := NewEncoder(nil)
	long.PutString(strings.Repeat("x", 20))
	count := NewEncoder(nil)
	count.PutUvarint(1000) // 1,000 elements of at least 2 bytes in 3 bytes
	count.PutFixed([]byte{1, 2, 3})
	for name, read := range map[string]func(d *Decoder){
		"truncated uvarint": func(d *Decoder) { d.Uvarint() },
		"truncated byte":    func(d *Decoder) { d.Byte(); d.Byte() },
		"string too long":   func(d *Decoder) { d.String("name", 10) },
		"count past bytes":  func(d *Decoder) { d.Count("things", 1<<20, 2) },
		"count past max":    func(d *Decoder) { d.Count("things", 10, 0) },
		"fixed past end":    func(d *Decoder) { d.Fixed(64) },
		"fixed32 past end":  func(d *Decoder) { d.Fixed32() },
		"not utf-8":         func(d *Decoder) { d.UTF8("text", 10) },
		"trailing bytes":    func(d *Decoder) { d.Byte() },
		"external decoder": func(d *Decoder) {
			d.Decode(func(p []byte) ([]byte, error) { return p, errors.New("bad cursor") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			input := map[string][]byte{
				"truncated uvarint": {0x80},
				"truncated byte":    {1},
				"string too long":   long.Bytes(),
				"count past bytes":  count.Bytes(),
				"count past max":    count.Bytes(),
				"fixed past end":    {1, 2},
				"fixed32 past end":  make([]byte, 31),
				"not utf-8":         {2, 0xff, 0xfe},
				"trailing bytes":    {1, 2},
				"external decoder":  {1},
			}[name]
			d := NewDecoder(input)
			read(&d)
			err := d.Done()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			// The failure sticks: later reads return zero values.
			if d.Uvarint() != 0 || d.Fixed(0) != nil || !errors.Is(d.Err(), ErrProtocol) {
				t.Error("a read after the failure did not return zero")
			}
		})
	}
}

func TestDecoderFailureConstructor(t *testing.T) {
	errBad := errors.New("malformed exec message")
	d := NewDecoderFunc([]byte{0x80}, func(msg string) error { return fmt.Errorf("%w: %s", errBad, msg) })
	d.Uvarint()
	if err := d.Done(); !errors.Is(err, errBad) || errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "bad uvarint") {
		t.Errorf("err = %v, want the constructor's error with context", err)
	}
}
