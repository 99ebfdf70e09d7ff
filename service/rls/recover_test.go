package rls

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGuardRecoversPanics(t *testing.T) {
	var buf bytes.Buffer
	n := 0
	g := Guard(slog.New(slog.NewTextHandler(&buf, nil)), func() { n++ }, time.Second)
	info := &grpc.UnaryServerInfo{FullMethod: "/x/Y"}
	resp, err := g(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	if resp != nil || status.Code(err) != codes.Internal || n != 1 {
		t.Errorf("Guard around a panicking handler = %v, %v, %d panics counted; want nil, Internal, 1", resp, err, n)
	}
	if log := buf.String(); !strings.Contains(log, "panic=boom") || !strings.Contains(log, "recover_test.go") {
		t.Errorf("log lacks the panic and its stack: %s", log)
	}
	s := RecoverStream(nil, nil)
	if err := s(nil, nil, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error { panic("boom") }); status.Code(err) != codes.Internal {
		t.Errorf("RecoverStream around a panicking handler = %v, want Internal", err)
	}
}

func TestGuardDeadline(t *testing.T) {
	deadlineOf := func(ctx context.Context) (time.Time, bool) {
		var d time.Time
		var ok bool
		Guard(nil, nil, 200*time.Millisecond)(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			d, ok = ctx.Deadline()
			return nil, nil
		})
		return d, ok
	}
	// The deadline lies 200ms after a moment within the call, however
	// long a busy machine takes over it.
	before := time.Now()
	d, ok := deadlineOf(context.Background())
	after := time.Now()
	if !ok || d.Before(before.Add(200*time.Millisecond)) || d.After(after.Add(200*time.Millisecond)) {
		t.Errorf("a call without a deadline got %v (set %v), want 200ms after a moment within [%v, %v]", d, ok, before, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	if d, ok := deadlineOf(ctx); !ok || !d.Equal(want) {
		t.Errorf("a call with its own 1h deadline got %v, want it kept (%v)", d, want)
	}
}
