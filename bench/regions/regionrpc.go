package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// The region hop of the hierarchical strategy: a region's members reach
// their region's service over this small RPC (Go's net/rpc over TCP),
// which carries a sluice.Store's AllowN, Reserve and Return. It stands in
// for sluice serve's remote store API, which is what a deployment uses: the
// harness measures the hierarchy, not this transport.

// RPCArgs is one call's request.
type RPCArgs struct {
	Key   string
	Limit sluice.Limit
	N     int
	At    int64 // µs since the epoch, Return's time; 0: zero
}

// RPCReply is one call's answer; Err is the store's error, as text.
type RPCReply struct {
	D   sluice.Decision
	At  int64
	Err string
}

// RegionRPC serves a sluice.Reserver to a region's members.
type RegionRPC struct{ s sluice.FullStore }

func (r *RegionRPC) AllowN(a RPCArgs, rep *RPCReply) error {
	d, err := r.s.AllowN(context.Background(), a.Key, a.Limit, a.N)
	rep.D = d
	if err != nil {
		rep.Err = err.Error()
	}
	return nil
}

func (r *RegionRPC) Reserve(a RPCArgs, rep *RPCReply) error {
	d, at, err := r.s.Reserve(context.Background(), a.Key, a.Limit, a.N)
	rep.D = d
	if !at.IsZero() {
		rep.At = at.UnixMicro()
	}
	if err != nil {
		rep.Err = err.Error()
	}
	return nil
}

func (r *RegionRPC) Return(a RPCArgs, rep *RPCReply) error {
	at := time.Time{}
	if a.At != 0 {
		at = time.UnixMicro(a.At)
	}
	if err := r.s.Return(context.Background(), a.Key, a.Limit, a.N, at); err != nil {
		rep.Err = err.Error()
	}
	return nil
}

// serveRPC serves s on ln until ctx ends.
func serveRPC(ctx context.Context, s sluice.FullStore, ln net.Listener) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Region", &RegionRPC{s}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.ServeConn(c)
		}()
	}
}

// rpcStore is a member's client of its region's service: a
// sluice.Reserver over the RPC.
type rpcStore struct {
	c *rpc.Client
}

func dialRPC(addr string) (*rpcStore, error) {
	c, err := rpc.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rpcStore{c: c}, nil
}

func (r *rpcStore) call(ctx context.Context, method string, a RPCArgs) (RPCReply, error) {
	var rep RPCReply
	call := r.c.Go("Region."+method, a, &rep, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	if call.Error != nil {
		return rep, fmt.Errorf("region rpc: %w", call.Error)
	}
	if rep.Err != "" {
		return rep, errors.New(rep.Err)
	}
	return rep, nil
}

func (r *rpcStore) AllowN(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	rep, err := r.call(ctx, "AllowN", RPCArgs{Key: key, Limit: lim, N: n})
	return rep.D, err
}

func (r *rpcStore) Reserve(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, time.Time, error) {
	rep, err := r.call(ctx, "Reserve", RPCArgs{Key: key, Limit: lim, N: n})
	at := time.Time{}
	if rep.At != 0 {
		at = time.UnixMicro(rep.At)
	}
	return rep.D, at, err
}

func (r *rpcStore) Return(ctx context.Context, key string, lim sluice.Limit, n int, at time.Time) error {
	a := RPCArgs{Key: key, Limit: lim, N: n}
	if !at.IsZero() {
		a.At = at.UnixMicro()
	}
	_, err := r.call(ctx, "Return", a)
	return err
}

func (r *rpcStore) Close() error { return r.c.Close() }

func (r *rpcStore) String() string { return "region-rpc" }
