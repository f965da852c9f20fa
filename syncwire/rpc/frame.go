package rpc

import (
	"encoding/binary"
	"fmt"
)

// Frame layout (one WebSocket binary message is exactly one frame):
//
//	type  u8
//	flags u8
//	id    uvarint (call id; 0 for session-level frames)
//	payload (the rest of the message)
//
// See docs/PROTOCOL.md for every type's payload.

// FrameType is a frame's first byte.
type FrameType uint8

const (
	FrameHello  FrameType = 1 // handshake; id 0
	FrameCall   FrameType = 2 // open a call: method, timeout, request body
	FrameReply  FrameType = 3 // the call's response body
	FrameError  FrameType = 4 // the call failed: code, message (id 0: the session)
	FrameData   FrameType = 5 // one message of the call's stream in the sender's direction
	FrameEnd    FrameType = 6 // the sender's stream on this call is complete
	FrameCredit FrameType = 7 // the receiver grants more stream credit
	FrameCancel FrameType = 8 // the caller abandons the call
)

func (t FrameType) String() string {
	switch t {
	case FrameHello:
		return "HELLO"
	case FrameCall:
		return "CALL"
	case FrameReply:
		return "REPLY"
	case FrameError:
		return "ERROR"
	case FrameData:
		return "DATA"
	case FrameEnd:
		return "END"
	case FrameCredit:
		return "CREDIT"
	case FrameCancel:
		return "CANCEL"
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

// Frame flags.
const (
	// FlagStream on CALL: a request stream follows; on REPLY: a response
	// stream follows.
	FlagStream uint8 = 1 << 0

	knownFlags = FlagStream
)

const (
	// MaxFrameSize bounds a whole frame: a full 512 KiB chunk plus headers
	// fits with room to spare. A larger message is refused with EPROTOCOL
	// and the session closes.
	MaxFrameSize = 1<<20 + 64<<10
	// maxHeader is the largest frame header (type, flags, 10-byte uvarint).
	maxHeader = 12
	// MaxPayload is the largest payload a frame can carry.
	MaxPayload = MaxFrameSize - maxHeader
	// maxID bounds call ids.
	maxID = 1 << 62
)

// Frame is one decoded frame. Payload aliases the message it came from.
type Frame struct {
	Type    FrameType
	Flags   uint8
	ID      uint64
	Payload []byte
}

// AppendFrame appends the frame's encoding to b.
func AppendFrame(b []byte, f Frame) ([]byte, error) {
	if f.ID > maxID {
		return b, protoErr("frame id %d out of range", f.ID)
	}
	if len(f.Payload) > MaxPayload {
		return b, protoErr("%s payload of %d bytes exceeds %d", f.Type, len(f.Payload), MaxPayload)
	}
	b = append(b, byte(f.Type), f.Flags)
	b = binary.AppendUvarint(b, f.ID)
	return append(b, f.Payload...), nil
}

// DecodeFrame decodes and checks one frame.
func DecodeFrame(b []byte) (Frame, error) {
	if len(b) > MaxFrameSize {
		return Frame{}, protoErr("frame of %d bytes exceeds %d", len(b), MaxFrameSize)
	}
	if len(b) < 3 {
		return Frame{}, protoErr("short frame of %d bytes", len(b))
	}
	f := Frame{Type: FrameType(b[0]), Flags: b[1]}
	if f.Type < FrameHello || f.Type > FrameCancel {
		return Frame{}, protoErr("unknown frame type %d", b[0])
	}
	if f.Flags&^knownFlags != 0 {
		return Frame{}, protoErr("%s: unknown flags %#x", f.Type, f.Flags)
	}
	if f.Flags&FlagStream != 0 && f.Type != FrameCall && f.Type != FrameReply {
		return Frame{}, protoErr("%s: stream flag", f.Type)
	}
	id, n := binary.Uvarint(b[2:])
	if n <= 0 || id > maxID {
		return Frame{}, protoErr("%s: bad id", f.Type)
	}
	f.ID = id
	f.Payload = b[2+n:]
	switch f.Type {
	case FrameHello:
		if id != 0 {
			return Frame{}, protoErr("HELLO with id %d", id)
		}
	case FrameError:
	default:
		if id == 0 {
			return Frame{}, protoErr("%s with id 0", f.Type)
		}
	}
	return f, nil
}
