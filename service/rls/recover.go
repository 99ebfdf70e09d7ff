package rls

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Guard returns the unary interceptor of sluice serve's gRPC server. It
// turns a panic of a handler into codes.Internal, logs an error line with
// the panic value and the stack, and calls panicked (when not nil) once per
// panic. And it gives a call that brings no deadline (no grpc-timeout) one
// of d (d <= 0: none): Envoy always sends its filter's timeout, so this
// bounds other clients, whose calls would otherwise wait as long as the
// store does. One interceptor costs a call level less than two chained.
func Guard(log *slog.Logger, panicked func(), d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				resp, err = nil, recovered(log, panicked, info.FullMethod, v)
			}
		}()
		if _, ok := ctx.Deadline(); ok || d <= 0 {
			return h(ctx, req)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h(ctx, req)
	}
}

// RecoverStream is Guard's panic recovery for streaming handlers (health
// Watch, reflection), which get no deadline: they are long-lived.
func RecoverStream(log *slog.Logger, panicked func()) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = recovered(log, panicked, info.FullMethod, v)
			}
		}()
		return h(srv, ss)
	}
}

func recovered(log *slog.Logger, panicked func(), method string, v any) error {
	if panicked != nil {
		panicked()
	}
	if log != nil {
		log.Error("panic serving gRPC call; answered Internal", "method", method,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
	return status.Error(codes.Internal, "internal error")
}
