package grpcfast

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The keys under which grpc-go's packages look up a call's metadata, its
// peer and its transport stream in its context. They are unexported, so
// they are learnt once by asking each package to look them up in a
// context that records the key it is asked for; the stream then answers
// those lookups itself, building a value only when it is read. Were a
// package to stop using context values, its key stays nil and the lookup
// finds nothing: TestContextKeys fails then.
var (
	mdKey     = probeKey(func(ctx context.Context) { metadata.FromIncomingContext(ctx) })
	peerKey   = probeKey(func(ctx context.Context) { peer.FromContext(ctx) })
	streamKey = probeKey(func(ctx context.Context) { grpc.ServerTransportStreamFromContext(ctx) })
)

type probeCtx struct {
	context.Context
	key any
}

func (p *probeCtx) Value(k any) any {
	if p.key == nil {
		p.key = k
	}
	return nil
}

func probeKey(lookup func(context.Context)) any {
	p := &probeCtx{Context: context.Background()}
	lookup(p)
	return p.key
}

// Value answers the lookups of the call's metadata, peer and transport
// stream (grpc.SetHeader, grpc.Method), and net/http's local address for
// the fallback.
func (st *stream) Value(key any) any {
	switch {
	case key == nil:
		return nil
	case key == mdKey:
		return st.incomingMD()
	case key == peerKey:
		return st.c.peer()
	case key == streamKey:
		return grpc.ServerTransportStream(st)
	case key == http.LocalAddrContextKey:
		return st.c.laddr
	}
	return nil
}

// incomingMD builds the call's metadata from its header fields, as
// grpc-go's server does: the content type (when gRPC's), the reserved
// names left out except :authority and user-agent, binary values decoded,
// host as :authority when that is missing.
func (st *stream) incomingMD() metadata.MD {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.md != nil {
		return st.md
	}
	md := make(metadata.MD, len(st.fields))
	for _, hf := range st.fields {
		switch hf.Name {
		case "content-type":
			if _, ok := contentSubtype(hf.Value); ok {
				md[hf.Name] = append(md[hf.Name], hf.Value)
			}
		case "grpc-accept-encoding":
			md[hf.Name] = append(md[hf.Name], hf.Value)
		case "grpc-encoding", ":method", ":path", "grpc-timeout", "connection":
		default:
			if isReservedHeader(hf.Name) && !isWhitelistedHeader(hf.Name) {
				continue
			}
			if v, err := decodeMetadataHeader(hf.Name, hf.Value); err == nil {
				md[hf.Name] = append(md[hf.Name], v)
			}
		}
	}
	if len(md[":authority"]) == 0 {
		if host, ok := md["host"]; ok {
			md[":authority"] = host
			delete(md, "host")
		}
	} else {
		delete(md, "host")
	}
	st.md = md
	return md
}

// peer is the connection's peer; on TLS its AuthInfo is the handshake's
// credentials.TLSInfo.
func (c *conn) peer() *peer.Peer {
	p := &peer.Peer{Addr: c.raddr, LocalAddr: c.laddr}
	if c.tls != nil {
		p.AuthInfo = credentials.TLSInfo{State: *c.tls, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	return p
}

// errIllegalHeaderWrite is grpc-go's answer to a header set after the
// headers went out.
var errIllegalHeaderWrite = status.Error(13, "transport: SendHeader called multiple times")

// Method is the call's full method name (grpc.Method).
func (st *stream) Method() string { return st.path }

// SetHeader adds md to the response headers (grpc.SetHeader).
func (st *stream) SetHeader(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.headerSent || st.closed {
		return errIllegalHeaderWrite
	}
	st.header = metadata.Join(st.header, md)
	return nil
}

// SendHeader adds md to the response headers and sends them now
// (grpc.SendHeader).
func (st *stream) SendHeader(md metadata.MD) error {
	c := st.c
	c.mu.Lock()
	if st.headerSent || st.closed {
		c.mu.Unlock()
		return errIllegalHeaderWrite
	}
	if md.Len() > 0 {
		st.header = metadata.Join(st.header, md)
	}
	st.writeHeadersLocked()
	st.flushLocked()
	return nil
}

// SetTrailer adds md to the trailers (grpc.SetTrailer).
func (st *stream) SetTrailer(md metadata.MD) error {
	if md.Len() == 0 {
		return nil
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed {
		return errIllegalHeaderWrite
	}
	st.trailerMD = metadata.Join(st.trailerMD, md)
	return nil
}
