package memcachestore

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"time"
)

// server is one memcached server and its connections: at most maxConns
// in use at once, and up to maxIdle kept open between calls.
type server struct {
	addr    string
	dialer  func(ctx context.Context) (net.Conn, error)
	slots   chan struct{} // a token per connection in use
	maxIdle int

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool
}

func newServer(addr string, o *Options, tc *tls.Config) *server {
	sv := &server{addr: addr, slots: make(chan struct{}, o.MaxConns), maxIdle: o.MaxIdleConns}
	nd := &net.Dialer{KeepAlive: 30 * time.Second, Resolver: o.Resolver}
	if tc == nil {
		sv.dialer = func(ctx context.Context) (net.Conn, error) { return nd.DialContext(ctx, "tcp", addr) }
		return sv
	}
	td := &tls.Dialer{NetDialer: nd, Config: tc}
	sv.dialer = func(ctx context.Context) (net.Conn, error) { return td.DialContext(ctx, "tcp", addr) }
	return sv
}

// get returns a connection, idle or new, waiting for a free slot while
// maxConns are in use, as long as ctx and deadline allow.
func (sv *server) get(ctx context.Context, deadline time.Time) (*conn, error) {
	if err := acquire(ctx, sv.slots, deadline); err != nil {
		return nil, err
	}
	sv.mu.Lock()
	if n := len(sv.idle); n > 0 {
		c := sv.idle[n-1]
		sv.idle[n-1] = nil
		sv.idle = sv.idle[:n-1]
		sv.mu.Unlock()
		c.reused = true
		return c, nil
	}
	sv.mu.Unlock()
	c, err := sv.dial(ctx, deadline)
	if err != nil {
		<-sv.slots
		return nil, err
	}
	return c, nil
}

func (sv *server) dial(ctx context.Context, deadline time.Time) (*conn, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := sv.dialer(dctx)
	if err != nil {
		return nil, fmt.Errorf("memcachestore: dial %s: %w", sv.addr, err)
	}
	return newConn(nc, sv), nil
}

// redial replaces c, a reused connection the server had closed, by a new
// one in the same slot; on an error the slot is free.
func (sv *server) redial(ctx context.Context, deadline time.Time, c *conn) (*conn, error) {
	c.nc.Close()
	n, err := sv.dial(ctx, deadline)
	if err != nil {
		<-sv.slots
		return nil, err
	}
	return n, nil
}

// put gives c back: kept idle when it is sound and there is room, closed
// otherwise.
func (sv *server) put(c *conn) {
	if !c.broken {
		sv.mu.Lock()
		if !sv.closed && len(sv.idle) < sv.maxIdle {
			c.reused, c.cmds = false, 0
			sv.idle = append(sv.idle, c)
			sv.mu.Unlock()
			<-sv.slots
			return
		}
		sv.mu.Unlock()
	}
	c.nc.Close()
	<-sv.slots
}

// close closes the idle connections; those in use close when put back.
func (sv *server) close() {
	sv.mu.Lock()
	idle := sv.idle
	sv.idle, sv.closed = nil, true
	sv.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// ring is the store's servers, in the order that chooses a key's server.
type ring struct {
	servers []*server
}

// pick returns the server of an item: the only one, or the one at
// CRC-32 (IEEE) of the name modulo the number of servers, as gomemcache's
// ServerList picks (so that envoyproxy/ratelimit and the store agree on
// where an item lives, given the same server list).
func (r *ring) pick(name []byte) *server {
	if len(r.servers) == 1 {
		return r.servers[0]
	}
	return r.servers[crc32.ChecksumIEEE(name)%uint32(len(r.servers))]
}
