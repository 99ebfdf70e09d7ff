// Package grpcfast is a lean gRPC server for unary calls: an HTTP/2 server
// on golang.org/x/net/http2's Framer that serves the unary methods
// registered on it itself, and hands every other stream (health Watch,
// server reflection, an unknown method, a compressed call) to a
// *grpc.Server through its ServeHTTP, on the same connection.
//
// A unary call on grpc-go's transport costs tens of microseconds of CPU:
// a goroutine hand-off per frame, a context and a metadata map per call,
// buffers per stream, a writer goroutine. Here the connection's reader
// decodes the call's headers and message in place, hands the complete
// call to a worker, and the worker's response is encoded straight into the
// connection's write buffer; the responses of concurrent calls go out in
// one write. What grpc-go's server does for a call is kept: its
// interceptors and its generated handlers (the same grpc.ServiceDesc),
// deadlines (grpc-timeout, and RST_STREAM at the deadline), cancellation,
// flow control, metadata (lazily, only when read), SetHeader/SetTrailer,
// peer, status codes and messages, the transport's bounds (message size,
// concurrent streams, header list size, handshake timeout, keepalive
// enforcement and pings, connection age and idleness) and graceful stop.
// The conformance tests run one suite of gRPC behaviours against this
// server and grpc-go's own.
//
// A stream for the fallback is handed to it once its first request
// message has arrived (or the client ended its side): until then it holds
// its header list, in Options.MaxPendingHeaderBytes, and its
// Options.FirstMessageTimeout, as a call served here does, and no
// goroutine.
//
// The connection is TLS when the listener is (tls.NewListener): the
// handshake runs within Options.ConnectionTimeout, and the fallback's
// requests carry the connection state, as net/http's would.
package grpcfast
