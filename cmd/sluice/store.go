package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/memstore"
)

// openStore returns the memory store, or the shared Redis store behind
// failover when --redis is set.
func openStore(ctx context.Context, f serveFlags, m *server.Metrics, log *slog.Logger) (*storeSet, error) {
	if f.redis == "" {
		ms := memstore.New()
		return &storeSet{store: ms, name: "memory", close: func() { ms.Close() }}, nil
	}
	return nil, errors.New("--redis: the Redis store is not built in yet")
}
