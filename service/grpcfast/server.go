package grpcfast

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of Options, grpc-go's.
const (
	defaultMaxRecvMsgSize    = 4 << 20
	defaultMaxSendMsgSize    = math.MaxInt32
	defaultMaxHeaderListSize = 16 << 20
	defaultConnTimeout       = 120 * time.Second
	defaultKeepaliveMinTime  = 5 * time.Minute
	defaultKeepaliveTime     = 2 * time.Hour
	defaultKeepaliveTimeout  = 20 * time.Second
	defaultWindow            = 65535
	infinity                 = time.Duration(math.MaxInt64)
	// maxSendWindow caps the windows a client grants, which a client
	// that overflows HTTP/2's 2^31-1 could otherwise grow without bound.
	maxSendWindow = 1 << 40
)

// Options are the bounds and hooks of a Server. Their zero values are
// grpc-go's defaults.
type Options struct {
	// MaxRecvMsgSize is the largest request message: a call whose message
	// is larger fails with RESOURCE_EXHAUSTED (grpc.MaxRecvMsgSize;
	// default 4 MiB).
	MaxRecvMsgSize int
	// MaxSendMsgSize is the largest response message (grpc.MaxSendMsgSize;
	// default math.MaxInt32).
	MaxSendMsgSize int
	// MaxConcurrentStreams is the most streams open at once on a
	// connection (SETTINGS_MAX_CONCURRENT_STREAMS); one beyond it is reset
	// with REFUSED_STREAM. 0: no limit.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize is the largest header list a stream may send,
	// decoded (SETTINGS_MAX_HEADER_LIST_SIZE; grpc.MaxHeaderListSize).
	// 0: 16 MiB, not advertised.
	MaxHeaderListSize uint32
	// ConnectionTimeout bounds a new connection's TLS handshake, HTTP/2
	// preface and first SETTINGS (grpc.ConnectionTimeout; default 120s).
	ConnectionTimeout time.Duration
	// Keepalive and KeepalivePolicy are grpc.KeepaliveParams and
	// grpc.KeepaliveEnforcementPolicy, with grpc-go's meaning and defaults.
	Keepalive       keepalive.ServerParameters
	KeepalivePolicy keepalive.EnforcementPolicy
	// InitialWindowSize and InitialConnWindowSize are the flow-control
	// windows the server grants a stream and the connection for what the
	// client sends (grpc.InitialWindowSize, grpc.InitialConnWindowSize);
	// below 64 KiB: 64 KiB.
	InitialWindowSize, InitialConnWindowSize int32

	// FirstMessageTimeout bounds the time from a stream's headers to its
	// request message (to the end of the request, for a unary call),
	// counted once the frames read with the headers are handled; a stream
	// still without one then is answered CANCELLED. 0: none.
	FirstMessageTimeout time.Duration
	// MaxPendingHeaderBytes bounds, per connection, the header lists (each
	// field's name and value and 32 bytes, as HTTP/2 counts them) of the
	// streams whose request message has not arrived; a stream that would
	// pass it is answered RESOURCE_EXHAUSTED at once. 0: none.
	MaxPendingHeaderBytes int64
	// Expired counts the streams ended by FirstMessageTimeout, Refused
	// those refused by MaxPendingHeaderBytes; either may be nil.
	Expired, Refused interface{ Inc() }

	// UnaryInterceptor runs around every unary call served here, as
	// grpc.UnaryInterceptor does on grpc-go's server (chain several with
	// grpc-go's ChainUnaryInterceptor semantics before passing them).
	UnaryInterceptor grpc.UnaryServerInterceptor
	// Workers is the number of goroutines kept to run calls (a call that
	// finds none idle runs in a goroutine of its own); 0: a goroutine per
	// call.
	Workers int
	// Inline runs each call on its connection's reader goroutine, and
	// writes the responses of the calls read together in one write: no
	// hand-off at all, for handlers that never wait (on a network, a
	// lock held long, a timer). A handler that waits holds every call of
	// its connection behind it.
	Inline bool
	// Codec, when not nil, decodes and encodes the messages it knows
	// instead of the protobuf runtime, with the runtime's results
	// (rlswire.Codec: the rate-limit service's).
	Codec Codec
	// Log receives the transport's own errors (a panic in this package, a
	// connection that failed); nil: none.
	Log *slog.Logger
	// Panicked, when not nil, is called once per panic recovered in this
	// package's own code (a handler's panic is the interceptor's to
	// recover, as on grpc-go's server).
	Panicked func()
}

// Codec decodes and encodes some messages faster than the protobuf
// runtime, to the same results; it reports false for a message it leaves
// to the runtime.
type Codec interface {
	// UnmarshalMessage decodes msg into v, a zero message; false leaves
	// v to proto.Unmarshal. msg is not kept.
	UnmarshalMessage(msg []byte, v any) bool
	// Size is the length of v's encoding, and whether AppendMessage
	// encodes v.
	Size(v any) (int, bool)
	// AppendMessage appends v's encoding, Size's length, to b.
	AppendMessage(b []byte, v any) []byte
}

// withDefaults returns o with grpc-go's defaults for its zero values.
func (o Options) withDefaults() Options {
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = defaultMaxRecvMsgSize
	}
	if o.MaxSendMsgSize <= 0 {
		o.MaxSendMsgSize = defaultMaxSendMsgSize
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = math.MaxUint32
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = defaultConnTimeout
	}
	kp := &o.Keepalive
	if kp.MaxConnectionIdle == 0 {
		kp.MaxConnectionIdle = infinity
	}
	if kp.MaxConnectionAge == 0 {
		kp.MaxConnectionAge = infinity
	}
	if kp.MaxConnectionAgeGrace == 0 {
		kp.MaxConnectionAgeGrace = infinity
	}
	if kp.Time == 0 {
		kp.Time = defaultKeepaliveTime
	}
	if kp.Timeout == 0 {
		kp.Timeout = defaultKeepaliveTimeout
	}
	if o.KeepalivePolicy.MinTime == 0 {
		o.KeepalivePolicy.MinTime = defaultKeepaliveMinTime
	}
	if o.InitialWindowSize < defaultWindow {
		o.InitialWindowSize = defaultWindow
	}
	if o.InitialConnWindowSize < defaultWindow {
		o.InitialConnWindowSize = defaultWindow
	}
	return o
}

// method is a unary method served here.
type method struct {
	desc *grpc.MethodDesc
	impl any
	info grpc.UnaryServerInfo
	// HandleUnary's: the request's maker and the method's implementation,
	// or nil (desc's generated handler).
	newRequest func() any
	handler    grpc.UnaryHandler
}

// Server serves gRPC on HTTP/2: the unary methods registered with
// RegisterService itself, every other stream through the fallback
// grpc.Server's ServeHTTP.
type Server struct {
	opts     Options
	fallback *grpc.Server
	methods  map[string]*method // by full method name, /pkg.Service/Method
	work     chan *stream       // to idle workers
	quitc    chan struct{}      // closed by Stop and GracefulStop: the workers end
	armed    atomic.Int64       // first-message timers made (tests)
	quitOnce sync.Once

	mu       sync.Mutex
	cv       *sync.Cond // signalled when a connection closes
	lis      map[net.Listener]bool
	conns    map[*conn]bool
	quit     bool // Stop or GracefulStop called
	draining bool // GracefulStop called
	serving  sync.WaitGroup
}

// New returns a Server that hands the streams it does not serve itself to
// fallback, which must have every service registered, those registered
// here included (it serves their calls when they are compressed or carry
// another codec's content type, and reflection lists them).
func New(fallback *grpc.Server, o Options) *Server {
	s := &Server{opts: o.withDefaults(), fallback: fallback, methods: map[string]*method{},
		lis: map[net.Listener]bool{}, conns: map[*conn]bool{}, quitc: make(chan struct{})}
	s.cv = sync.NewCond(&s.mu)
	if n := s.opts.Workers; n > 0 {
		s.work = make(chan *stream)
		for range n {
			go s.worker()
		}
	}
	return s
}

// RegisterService serves the unary methods of sd, implemented by impl,
// here; its streaming methods stay with the fallback. Call it before
// Serve.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	for i := range sd.Methods {
		md := &sd.Methods[i]
		name := "/" + sd.ServiceName + "/" + md.MethodName
		s.methods[name] = &method{desc: md, impl: impl, info: grpc.UnaryServerInfo{Server: impl, FullMethod: name}}
	}
}

// HandleUnary serves the unary method full (/pkg.Service/Method, one that
// RegisterService registered) by calling handler, the method's
// implementation, on a request made by newRequest and decoded, through
// the interceptor, as its generated handler does, but with the call's
// grpc.UnaryServerInfo made once for all calls and no function made per
// call: three allocations a call fewer. Interceptors must not modify the
// info. Call it before Serve.
func (s *Server) HandleUnary(full string, newRequest func() any, handler grpc.UnaryHandler) error {
	m, ok := s.methods[full]
	if !ok {
		return fmt.Errorf("grpcfast: HandleUnary: %s is not a registered unary method", full)
	}
	m.newRequest, m.handler = newRequest, handler
	return nil
}

// Serve accepts connections on l and serves each, until l fails or the
// server stops; it returns grpc.ErrServerStopped after Stop or
// GracefulStop, as grpc-go's Serve does.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.quit {
		s.mu.Unlock()
		l.Close()
		return grpc.ErrServerStopped
	}
	s.lis[l] = true
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	var delay time.Duration // backoff on temporary accept errors, as net/http's
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			quit := s.quit
			s.mu.Unlock()
			if quit {
				return grpc.ErrServerStopped
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			s.mu.Lock()
			delete(s.lis, l)
			s.mu.Unlock()
			l.Close()
			return err
		}
		delay = 0
		s.serving.Add(1)
		go func() {
			defer s.serving.Done()
			s.serveConn(nc)
		}()
	}
}

// serveConn runs the handshake of nc and serves it until it closes.
func (s *Server) serveConn(nc net.Conn) {
	c := newConn(s, nc)
	defer s.recoverConn(c)
	if err := c.handshake(); err != nil {
		nc.Close()
		return
	}
	s.mu.Lock()
	if s.quit {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = true
	draining := s.draining
	s.mu.Unlock()
	defer s.removeConn(c)
	if draining {
		c.drain("graceful_stop")
	}
	go c.keepalive()
	c.readLoop()
}

// recoverConn closes c after a panic of the transport's own code, logs it
// and counts it; the process goes on.
func (s *Server) recoverConn(c *conn) {
	if v := recover(); v != nil {
		s.panicked("connection", v)
		c.closeWith(fmt.Errorf("grpcfast: panic: %v", v))
	}
}

func (s *Server) panicked(where string, v any) {
	if s.opts.Panicked != nil {
		s.opts.Panicked()
	}
	if s.opts.Log != nil {
		s.opts.Log.Error("panic in the gRPC transport", "where", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.cv.Broadcast()
	s.mu.Unlock()
}

// Stop closes the listeners and every connection at once, cancelling the
// calls in flight, then stops the fallback.
func (s *Server) Stop() {
	s.mu.Lock()
	s.quit = true
	s.closeListenersLocked()
	conns := s.conns
	s.conns = map[*conn]bool{}
	s.mu.Unlock()
	for c := range conns {
		c.closeWith(errors.New("grpcfast: server stopped"))
	}
	s.serving.Wait()
	s.quitOnce.Do(func() { close(s.quitc) })
	s.fallback.Stop()
}

// GracefulStop closes the listeners, tells every connection to go away
// (GOAWAY, as grpc-go's GracefulStop), waits until each has finished its
// calls and closed, then stops the fallback gracefully.
func (s *Server) GracefulStop() {
	s.mu.Lock()
	s.quit, s.draining = true, true
	s.closeListenersLocked()
	for c := range s.conns {
		c.drain("graceful_stop")
	}
	for len(s.conns) > 0 {
		s.cv.Wait()
	}
	s.mu.Unlock()
	s.serving.Wait()
	s.quitOnce.Do(func() { close(s.quitc) })
	s.fallback.GracefulStop()
}

func (s *Server) closeListenersLocked() {
	for l := range s.lis {
		l.Close()
	}
	s.lis = map[net.Listener]bool{}
}

// worker runs the calls handed to it until the server stops.
func (s *Server) worker() {
	for {
		select {
		case st := <-s.work:
			st.run()
		case <-s.quitc:
			return
		}
	}
}

// dispatch runs st's call on an idle worker, or on a goroutine of its own
// when none is idle.
func (s *Server) dispatch(st *stream) {
	if s.work != nil {
		select {
		case s.work <- st:
			return
		default:
		}
	}
	go st.run()
}

// tlsState is the connection state of a TLS connection, nil otherwise.
func tlsState(nc net.Conn) *tls.ConnectionState {
	if tc, ok := nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		return &cs
	}
	return nil
}

// splitMethod splits /pkg.Service/Method; ok is false for a malformed name.
func splitMethod(full string) (service, method string, ok bool) {
	sm, found := strings.CutPrefix(full, "/")
	if !found {
		return "", "", false
	}
	i := strings.LastIndex(sm, "/")
	if i < 0 {
		return "", "", false
	}
	return sm[:i], sm[i+1:], true
}
