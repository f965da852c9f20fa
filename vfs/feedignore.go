package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/wsync/wsync/watermark"
)

// IgnoreKey is an ignore list's identity for comparing two lists: the
// patterns in order (order matters: a later pattern overrides an earlier
// one), nil and DefaultIgnore the same list. Never "".
func IgnoreKey(list []string) string {
	if list == nil {
		list = DefaultIgnore
	}
	return "gitignore\n" + strings.Join(list, "\n")
}

// feedIgnoreKey is the meta row that records a peer's FeedIgnore. (meta
// is a key-value table: no schema step.)
func feedIgnoreKey(peer string) string { return "feed_ignore/" + peer }

// FeedIgnore is the ignore list key (IgnoreKey) the peer's feed was last
// pulled with: "" when none was recorded.
func (s *Store) FeedIgnore(ctx context.Context, peer string) (string, error) {
	var key string
	err := s.committed().QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, feedIgnoreKey(peer)).Scan(&key)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("feed ignore %q: %w", peer, err)
	}
	return key, nil
}

// SetFeedIgnore records key as the list the peer's feed is pulled with
// from set's fetch cursor on, with set, in one transaction: a pull that
// re-baselines for a new list never leaves the cursor of one list beside
// the key of another.
func (s *Store) SetFeedIgnore(ctx context.Context, peer, key string, set watermark.Set) error {
	return s.update(ctx, func(t *wtx) error {
		if err := t.setWatermarks(peer, set); err != nil {
			return err
		}
		_, err := t.exec(`INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, feedIgnoreKey(peer), key)
		if err != nil {
			return fmt.Errorf("set feed ignore %q: %w", peer, err)
		}
		return nil
	})
}
