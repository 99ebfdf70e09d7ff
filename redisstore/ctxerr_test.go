package redisstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// lateCtx has a deadline but no error yet, as a context whose timer has not
// fired.
type lateCtx struct {
	context.Context
	d time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.d, true }

// A failure after the caller's context ended matches the context's error,
// whatever the client reported (a dial cut short by the deadline reports
// "i/o timeout"); before, it is left alone.
func TestWithCtx(t *testing.T) {
	ioTimeout := &os.SyscallError{Syscall: "dial", Err: os.ErrDeadlineExceeded}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -1)
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error // also matched; nil: only err
	}{
		{"live", context.Background(), ioTimeout, nil},
		{"deadline", expired, ioTimeout, context.DeadlineExceeded},
		{"canceled", done, ioTimeout, context.Canceled},
		{"already the context's", expired, context.DeadlineExceeded, context.DeadlineExceeded},
		{"deadline passed, timer not yet fired", lateCtx{context.Background(), time.Now().Add(-time.Millisecond)}, ioTimeout, context.DeadlineExceeded},
		{"deadline ahead", lateCtx{context.Background(), time.Now().Add(time.Hour)}, ioTimeout, nil},
	}
	for _, tt := range tests {
		got := withCtx(tt.ctx, tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("%s: withCtx = %v, does not match the client's error %v", tt.name, got, tt.err)
		}
		if tt.want != nil && !errors.Is(got, tt.want) {
			t.Errorf("%s: withCtx = %v, does not match %v", tt.name, got, tt.want)
		}
		if tt.want == nil && (errors.Is(got, context.DeadlineExceeded) || errors.Is(got, context.Canceled)) {
			t.Errorf("%s: withCtx = %v, matches a context error of a live context", tt.name, got)
		}
		if tt.name == "already the context's" && got != tt.err {
			t.Errorf("%s: withCtx = %v, want the error unchanged", tt.name, got)
		}
	}
}
