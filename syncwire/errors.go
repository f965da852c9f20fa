package syncwire

import (
	"syscall"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// The wire codes of the sync protocol: the store sentinels of vfs,
// chunkstore and watermark. The numbers are part of the protocol
// (docs/PROTOCOL.md); rpc owns 0 and 30..37, execrpc 40..42.
const (
	CodeNotExist     rpc.Code = 1
	CodeExist        rpc.Code = 2
	CodeNotDir       rpc.Code = 3
	CodeIsDir        rpc.Code = 4
	CodeNotEmpty     rpc.Code = 5
	CodeInvalid      rpc.Code = 6
	CodePerm         rpc.Code = 7
	CodeNameTooLong  rpc.Code = 8
	CodeNoSpace      rpc.Code = 9
	CodeFileTooBig   rpc.Code = 10
	CodeQuota        rpc.Code = 11
	CodeUnknownHash  rpc.Code = 20
	CodeHashMismatch rpc.Code = 21
	CodeInvariant    rpc.Code = 22
)

// init registers the sync codes, so errors.Is(err, vfs.ErrNotExist),
// chunkstore.ErrUnknownHash, watermark.ErrInvariant and the rest hold on
// the caller's side exactly as on the callee's. The order is the encoding
// precedence among them (after rpc's own codes).
func init() {
	rpc.RegisterAlias(rpc.CodeShutdown, vfs.ErrClosed)
	rpc.RegisterCode(CodeUnknownHash, "EUNKNOWN_HASH", chunkstore.ErrUnknownHash)
	rpc.RegisterCode(CodeHashMismatch, "EHASH_MISMATCH", chunkstore.ErrHashMismatch)
	rpc.RegisterCode(CodeInvariant, "EINVARIANT", watermark.ErrInvariant)
	rpc.RegisterCode(CodeNotExist, "ENOENT", vfs.ErrNotExist)
	rpc.RegisterCode(CodeExist, "EEXIST", vfs.ErrExist)
	rpc.RegisterCode(CodeNotDir, "ENOTDIR", vfs.ErrNotDir)
	rpc.RegisterCode(CodeIsDir, "EISDIR", vfs.ErrIsDir)
	rpc.RegisterCode(CodeNotEmpty, "ENOTEMPTY", vfs.ErrNotEmpty)
	rpc.RegisterCode(CodeNameTooLong, "ENAMETOOLONG", vfs.ErrNameTooLong)
	rpc.RegisterCode(CodeInvalid, "EINVAL", vfs.ErrInvalid,
		chunkstore.ErrBadManifest, chunkstore.ErrBadHash, chunkstore.ErrChunkTooLarge, watermark.ErrBadCursor)
	rpc.RegisterCode(CodePerm, "EPERM", vfs.ErrPerm)
	rpc.RegisterCode(CodeNoSpace, "ENOSPC", vfs.ErrNoSpace, syscall.ENOSPC, syscall.EDQUOT)
	rpc.RegisterCode(CodeFileTooBig, "EFBIG", vfs.ErrFileTooBig)
	rpc.RegisterCode(CodeQuota, "EDQUOT", vfs.ErrQuota)
	// SQLite's "database or disk is full" carries no errno; vfs.Errno
	// knows it.
	rpc.RegisterMatch(CodeNoSpace, func(err error) bool { return vfs.Errno(err) == syscall.ENOSPC })
}

// protoErr builds an rpc.ErrProtocol with context.
var protoErr = rpc.ProtocolError
