package remotestore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/storeapi"
)

// TestCapabilitiesRefresh: when the remembered answer of Capabilities is
// old, one call asks again and the others go on with the old answer
// meanwhile: a Reserve made while the server holds that question is
// answered before it.
func TestCapabilitiesRefresh(t *testing.T) {
	srv, err := storeapi.New(newMem(t))
	if err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var hold atomic.Bool
	holdCaps := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/Capabilities") && hold.Load() {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return h(ctx, req)
	})
	rs := dial(t, serveOn(t, srv, grpc.NewServer(append(srv.ServerOptions(), holdCaps)...)))
	lim := sluice.PerSecond(10)
	if _, _, err := rs.Reserve(ctx, "k", lim, 1); err != nil { // learns the capabilities
		t.Fatal(err)
	}
	remotestore.ExpireCapabilities(rs)
	hold.Store(true)
	firstDone := make(chan error, 1)
	go func() {
		// A deadline, so that a Store that makes the other calls wait for
		// this one fails the test rather than hangs.
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _, err := rs.Reserve(c, "k", lim, 1)
		firstDone <- err
	}()
	<-arrived // the first call asks, and waits for the answer
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err = rs.Reserve(c, "k", lim, 1)
	select {
	case <-firstDone:
		t.Fatal("a Reserve waited for another call's Capabilities")
	default:
	}
	if err != nil {
		t.Errorf("Reserve while another call asks the capabilities: %v", err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Errorf("the Reserve that asked: %v", err)
	}
}
