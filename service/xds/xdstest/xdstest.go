// Package xdstest runs an xDS control plane for tests: go-control-plane's
// ADS server on a snapshot cache, as Envoy Gateway's control plane is
// built, on a loopback port. It records the requests and the headers it
// receives, and can stop and start again on the same port.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Server is a running control plane.
type Server struct {
	Addr  string // 127.0.0.1:port
	cache cache.SnapshotCache
	xds   server.Server
	tls   *tls.Config

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every request or stream
	requests []*discovery.DiscoveryRequest
	nodes    map[int64]string // stream -> the node id of its first request
	headers  []metadata.MD    // of every stream opened
	grpc     *grpc.Server
	done     chan struct{} // closed when grpc's Serve returns
}

// Start serves on a free loopback port, plaintext when tlsConfig is nil;
// the test's cleanup stops it.
func Start(t testing.TB, tlsConfig *tls.Config) *Server {
	t.Helper()
	s := &Server{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), tls: tlsConfig, changed: make(chan struct{}), nodes: map[int64]string{}}
	s.xds = server.NewServer(context.Background(), s.cache, server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = append(s.headers, md.Copy())
			s.notify()
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			r = proto.Clone(r).(*discovery.DiscoveryRequest)
			s.mu.Lock()
			if r.GetNode() != nil {
				s.nodes[id] = r.GetNode().GetId()
			} else if n, ok := s.nodes[id]; ok {
				r.Node = &corev3.Node{Id: n} // the stream's node, for WaitRequest's predicates
			}
			s.requests = append(s.requests, r)
			s.notify()
			s.mu.Unlock()
			return nil
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	s.serve(l)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serve(l net.Listener) {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	done := make(chan struct{})
	s.mu.Lock()
	s.grpc, s.done = g, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = g.Serve(l)
	}()
}

// Stop stops serving and closes every stream: the control plane goes away.
func (s *Server) Stop() {
	s.mu.Lock()
	g, done := s.grpc, s.done
	s.grpc = nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.Stop()
	<-done
}

// Restart serves again on the same port, with the same snapshots.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	var l net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if l, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening again on %s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond) // the port is released asynchronously
	}
	s.serve(l)
}

// Set makes the snapshot of node version, holding resources.
func (s *Server) Set(t testing.TB, node, version string, resources ...*rlsconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(resources))
	for i, r := range resources {
		rs[i] = r
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// WaitRequest waits until the server has received a request for which ok
// is true, and returns it; it fails the test after timeout. A request
// without a node carries the node id of its stream's first request.
func (s *Server) WaitRequest(t testing.TB, timeout time.Duration, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	var found *discovery.DiscoveryRequest
	s.wait(t, timeout, func() bool {
		for _, r := range s.requests {
			if ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// Headers returns the gRPC metadata of every stream opened so far.
func (s *Server) Headers() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metadata.MD(nil), s.headers...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.requests...)
}

// wait waits until cond, called with s.mu held, is true.
func (s *Server) wait(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("xds control plane: condition not met within %v; requests: %v", timeout, s.Requests())
		}
	}
}

// IsACK reports whether r acknowledges version.
func IsACK(version string) func(*discovery.DiscoveryRequest) bool {
	return func(r *discovery.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	}
}

// ACKOf reports whether r is node's acknowledgement of version.
func ACKOf(node, version string) func(*discovery.DiscoveryRequest) bool {
	return func(r *discovery.DiscoveryRequest) bool { return r.GetNode().GetId() == node && IsACK(version)(r) }
}

// IsNACK reports whether r rejects a response, keeping version.
func IsNACK(version string) func(*discovery.DiscoveryRequest) bool {
	return func(r *discovery.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() != nil && r.GetVersionInfo() == version
	}
}
