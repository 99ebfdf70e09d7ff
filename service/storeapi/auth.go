package storeapi

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/service/admin"
)

// authenticate is the interceptor that answers authenticated callers
// only: Unauthenticated without a valid credential, PermissionDenied for a
// caller that may not call at all.
func (s *Server) authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if _, err := s.auth.Authenticate(callerCredentials(ctx)); err != nil {
		var ae *admin.AuthError
		code := codes.Unauthenticated
		if errors.As(err, &ae) && ae.Forbidden {
			code = codes.PermissionDenied
		}
		s.log.Debug("store API: caller refused", "method", info.FullMethod, "err", err)
		return nil, status.Error(code, err.Error())
	}
	return h(ctx, req)
}

// callerCredentials are what the caller of ctx presents: its
// authorization metadata, its TLS client certificate, its address.
func callerCredentials(ctx context.Context) admin.Credentials {
	var c admin.Credentials
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			c.Authorization = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			c.RemoteAddr = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			c.PeerCertificates = ti.State.PeerCertificates
		}
	}
	return c
}
