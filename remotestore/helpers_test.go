package remotestore_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/storeapi"
)

// serve serves store's store API on a loopback port until the test ends,
// and returns its address.
func serve(t testing.TB, store sluice.Store, opts ...storeapi.Option) string {
	t.Helper()
	srv, err := storeapi.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, srv, grpc.NewServer(srv.ServerOptions()...))
}

// serveOn serves srv on g on a loopback port until the test ends.
func serveOn(t testing.TB, srv *storeapi.Server, g *grpc.Server) string {
	t.Helper()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { g.Serve(lis); close(done) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// dial returns a Store reaching addr, closed when the test ends.
func dial(t testing.TB, addr string, opts ...remotestore.Option) *remotestore.Store {
	t.Helper()
	rs, err := remotestore.Dial(addr, append([]remotestore.Option{remotestore.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// newMem returns a memory store closed when the test ends.
func newMem(t testing.TB, opts ...memstore.Option) *memstore.Store {
	s := memstore.New(opts...)
	t.Cleanup(func() { s.Close() })
	return s
}

// mustConn is a plaintext gRPC connection to addr, closed when the test
// ends.
func mustConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
