package refstats

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// method is the statistics of one gRPC method.
type method struct {
	total *Counter
	time  *Timer
}

// UnaryInterceptor counts every unary gRPC call as the reference does:
// ratelimit_server.<Method>.total_requests, and its duration in whole
// milliseconds as the timer ratelimit_server.<Method>.response_time. The
// methods are the server's (an unknown method reaches no interceptor).
func (s *Stats) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		m := s.method(info.FullMethod)
		m.total.Inc()
		resp, err := handler(ctx, req)
		m.time.Record(float64(time.Since(start).Milliseconds()))
		return resp, err
	}
}

func (s *Stats) method(full string) *method {
	if m, ok := s.methods.Load(full); ok {
		return m.(*method)
	}
	name := "unknown"
	if _, after, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/"); ok {
		name = after
	}
	p := serverScope + name + "."
	m, _ := s.methods.LoadOrStore(full, &method{total: s.counter(p + "total_requests"), time: s.st.Timer(s.tags.Name(p + "response_time"))})
	return m.(*method)
}
