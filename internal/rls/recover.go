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

// RecoverUnary returns an interceptor that turns a panic of a unary handler
// into codes.Internal, logs an error line with the panic value and the
// stack, and calls panicked (when not nil) once per panic.
func RecoverUnary(log *slog.Logger, panicked func()) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				resp, err = nil, recovered(log, panicked, info.FullMethod, v)
			}
		}()
		return h(ctx, req)
	}
}

// RecoverStream is RecoverUnary for streaming handlers (health Watch,
// reflection).
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

// Guard is RecoverUnary and DefaultDeadline in one interceptor, which
// costs one call level less than chaining the two.
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

// DefaultDeadline returns an interceptor that gives a unary call that
// brings no deadline (no grpc-timeout) one of d; d <= 0 leaves calls as
// they come. Envoy always sends its filter's timeout, so this bounds other
// clients, whose calls would otherwise wait as long as the store does.
func DefaultDeadline(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); ok || d <= 0 {
			return h(ctx, req)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h(ctx, req)
	}
}
