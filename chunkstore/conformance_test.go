package chunkstore

import (
	"database/sql"
	"testing"
)

// Every layout the store supports runs the same suite.

func TestConformanceSplitLayoutOnDisk(t *testing.T) {
	RunConformance(t, func(t *testing.T) (*Store, *sql.DB) { return splitStore(t, 0, false) })
}

func TestConformanceAllInlineInMemory(t *testing.T) {
	RunConformance(t, func(t *testing.T) (*Store, *sql.DB) {
		return newTestStore(t, Options{}), openMemDB(t)
	})
}

func TestConformanceSplitLayoutTinyInlineMax(t *testing.T) {
	RunConformance(t, func(t *testing.T) (*Store, *sql.DB) { return splitStore(t, 1024, true) })
}
