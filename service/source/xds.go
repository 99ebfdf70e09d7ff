package source

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/xds"
)

// XDS is the configuration from an xDS control plane: every update the
// client receives goes through the Applier as a reload, and one that fails
// (an invalid resource, a Check's error) is rejected (NACK) with the
// running configuration kept.
type XDS struct {
	loaded atomic.Bool
	first  chan struct{} // closed when the first configuration is in force
	once   sync.Once
	stop   func()
}

// StartXDS subscribes to the configuration with the client options o
// (whose Apply it sets), reads each update's resources with read, and puts
// it in force through a, until Stop.
func StartXDS(o xds.Options, read config.Options, a *Applier) (*XDS, error) {
	x := &XDS{first: make(chan struct{})}
	o.Apply = func(u xds.Update) error {
		c, err := read.FromXDS(u.Resources)
		if err := a.Reload(c, err, Origin{"xds", u.Version}); err != nil {
			return err
		}
		x.loaded.Store(true)
		x.once.Do(func() { close(x.first) })
		return nil
	}
	client, err := xds.New(o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { client.Run(ctx) })
	x.stop = func() {
		cancel()
		wg.Wait()
	}
	return x, nil
}

// Ready is /readyz's condition: a first configuration is in force.
func (x *XDS) Ready() (bool, string) {
	if x.loaded.Load() {
		return true, ""
	}
	return false, "no configuration received from the xDS control plane yet"
}

// ErrNoConfig is Wait's error when ctx ends before a first configuration.
var ErrNoConfig = errors.New("stopped before a first configuration arrived from the xDS control plane")

// Wait waits until a first configuration is in force, as
// envoyproxy/ratelimit does before it serves, or until ctx ends
// (ErrNoConfig).
func (x *XDS) Wait(ctx context.Context) error {
	select {
	case <-x.first:
		return nil
	case <-ctx.Done():
		return ErrNoConfig
	}
}

// Stop ends the subscription and waits for the client to stop.
func (x *XDS) Stop() { x.stop() }
