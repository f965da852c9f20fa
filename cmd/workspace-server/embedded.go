package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/fusefs"
)

// embeddedComputerd runs computerd in this process: its mount at mountDir,
// its store under dataDir/computerd (on disk, so a restart keeps the
// container side and the next sync is incremental), its sync endpoint on a
// loopback port with a fresh random token.
func embeddedComputerd(ctx context.Context, mountDir, dataDir string) (string, string, func() error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		ln.Close()
		return "", "", nil, err
	}
	token := hex.EncodeToString(b[:])
	d, err := computer.Start(ctx, computer.Config{
		Listener: ln,
		Mount:    mountDir,
		State:    filepath.Join(dataDir, "computerd", "state.db"),
		Token:    token,
		Owner:    fusefs.Owner{},
		Logger:   slog.Default().With("embedded", true),
	})
	if err != nil {
		return "", "", nil, err
	}
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return d.Shutdown(ctx)
	}
	return d.SyncURL(), token, stop, nil
}
