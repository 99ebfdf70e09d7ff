package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// StreamLimits bound what a gRPC stream holds between its headers and its
// first request message. A client may open --grpc-max-concurrent-streams
// streams on a connection and send only their HEADERS: each holds its
// decoded header list (bounded by grpc.MaxHeaderListSize) and a worker
// until its message comes, and gRPC's own deadlines (the call's, the
// interceptors') start only then.
type StreamLimits struct {
	// FirstMessage bounds the time from a stream's headers to its first
	// message: a stream still without one is cancelled then (the client
	// sees CANCELLED). 0: none.
	FirstMessage time.Duration
	// MaxPendingHeaderBytes bounds, per connection, the header lists of
	// the streams whose first message has not arrived, counted as HTTP/2
	// counts a header list (each field's name and value and 32 bytes): a
	// stream that would pass it is refused at once with
	// RESOURCE_EXHAUSTED. 0: none.
	MaxPendingHeaderBytes int64
	// Expired counts the streams cancelled by FirstMessage, Refused those
	// refused by MaxPendingHeaderBytes; either may be nil.
	Expired, Refused interface{ Inc() }
}

// Streams enforces StreamLimits on a gRPC server. Install every one of
// its ServerOptions, UnaryInterceptor and StreamInterceptor.
type Streams struct{ l StreamLimits }

// NewStreams returns the enforcement of l.
func NewStreams(l StreamLimits) *Streams { return &Streams{l: l} }

// ServerOptions are the options that see a stream before its message: a
// tap handle, and transport credentials that only give each connection
// its account of pending header bytes (they do no handshake: TLS, when
// on, is the listener's). They replace any other grpc.InTapHandle and
// grpc.Creds.
func (s *Streams) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.Creds(accountCreds{}), grpc.InTapHandle(s.tap)}
}

// UnaryInterceptor marks a unary call's message as arrived: gRPC calls it
// once the message is read. Put it first in the chain.
func (s *Streams) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
			p.arrived()
		}
		return h(ctx, req)
	}
}

// StreamInterceptor marks a streaming call's first message as arrived
// when the handler receives it. Put it first in the chain.
func (s *Streams) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		p, ok := ss.Context().Value(pendingKey{}).(*pending)
		if !ok {
			return h(srv, ss)
		}
		return h(srv, &firstRecv{ServerStream: ss, p: p})
	}
}

type firstRecv struct {
	grpc.ServerStream
	p *pending
}

func (f *firstRecv) RecvMsg(m any) error {
	err := f.ServerStream.RecvMsg(m)
	if err == nil && f.p != nil {
		f.p.arrived()
		f.p = nil
	}
	return err
}

// errHeaderBudget is the answer to a stream past MaxPendingHeaderBytes.
var errHeaderBudget = errors.New("header lists of streams awaiting their message exceed the connection's budget")

// tap runs on a stream's headers, before the stream is served: it counts
// the header list against the connection's budget and starts the
// stream's first-message timer.
func (s *Streams) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.l.FirstMessage <= 0 && s.l.MaxPendingHeaderBytes <= 0 {
		return ctx, nil
	}
	p := &pending{l: &s.l, size: HeaderListSize(info.Header)}
	if pr, ok := peer.FromContext(ctx); ok {
		p.acct, _ = pr.AuthInfo.(*account)
	}
	if p.acct != nil && s.l.MaxPendingHeaderBytes > 0 {
		if n := p.acct.pending.Add(p.size); n > s.l.MaxPendingHeaderBytes {
			p.acct.pending.Add(-p.size)
			if s.l.Refused != nil {
				s.l.Refused.Inc()
			}
			return nil, status.Error(codes.ResourceExhausted, fmt.Sprintf("%v (%d bytes held, %d asked, budget %d)", errHeaderBudget, n-p.size, p.size, s.l.MaxPendingHeaderBytes))
		}
	} else {
		p.acct = nil // nothing counted, nothing to give back
	}
	if s.l.FirstMessage > 0 {
		ctx, p.cancel = context.WithCancel(ctx)
		p.timer = time.AfterFunc(s.l.FirstMessage, p.expire)
	}
	// When the stream ends without a message (the client resets it), the
	// stream's context ends: give the bytes back and stop the timer.
	p.stop = context.AfterFunc(ctx, p.done)
	return context.WithValue(ctx, pendingKey{}, p), nil
}

type pendingKey struct{}

// pending is a stream whose first message has not arrived.
type pending struct {
	l      *StreamLimits
	acct   *account // nil: not counted
	size   int64
	cancel context.CancelFunc
	timer  *time.Timer
	stop   func() bool

	once sync.Once
}

// arrived ends the stream's wait when its message arrived.
func (p *pending) arrived() {
	p.done()
	p.stop()
}

// done ends the stream's wait: its message arrived, or it ended.
func (p *pending) done() {
	p.once.Do(func() {
		if p.timer != nil {
			p.timer.Stop()
		}
		if p.acct != nil {
			p.acct.pending.Add(-p.size)
		}
	})
}

// expire cancels a stream whose message did not come in time.
func (p *pending) expire() {
	expired := false
	p.once.Do(func() {
		expired = true
		if p.acct != nil {
			p.acct.pending.Add(-p.size)
		}
	})
	if !expired {
		return // the message came meanwhile
	}
	if p.l.Expired != nil {
		p.l.Expired.Inc()
	}
	p.cancel()
}

// HeaderListSize is the size of md as HTTP/2 counts a header list: each
// field's name and value, and 32 bytes.
func HeaderListSize(md metadata.MD) int64 {
	var n int64
	for k, vs := range md {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 32)
		}
	}
	return n
}

// account is a connection's count of pending header bytes, reached from a
// stream through its peer's AuthInfo.
type account struct {
	credentials.CommonAuthInfo
	pending atomic.Int64
}

func (*account) AuthType() string { return "sluice" }

// accountCreds are server transport credentials that do no handshake and
// give each connection an account.
type accountCreds struct{}

func (accountCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	level := credentials.NoSecurity
	if _, ok := c.(*tls.Conn); ok {
		level = credentials.PrivacyAndIntegrity // the listener's TLS
	}
	return c, &account{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: level}}, nil
}

func (accountCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("listen: server credentials only")
}

func (accountCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "sluice"}
}

func (c accountCreds) Clone() credentials.TransportCredentials { return c }

func (accountCreds) OverrideServerName(string) error { return nil }
