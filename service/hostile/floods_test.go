package hostile

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// floodsClass: 20,000 descriptors in one ShouldRateLimit, 20,000 entries
// in one descriptor, and /json with 20,000 descriptors, from two clients
// at once. Past --max-descriptors or --max-descriptor-entries a request is
// refused (InvalidArgument naming descriptors or entries, or
// ResourceExhausted past the message size); at the bounds it is decided
// within floodDecideWithin.
//
// The floods are judged by their answers, not by time: the class runs with
// HTTP read and write timeouts no busy machine reaches (a /json flood of
// 840 KB is parsed whole before its descriptors are counted, which took
// more than the common 2 s at load 25 with -race, and the write timeout
// then closed the connection unanswered); the slow classes test those
// timeouts.
var floodsClass = class{name: "floods", run: runFloods, flags: []flagArg{
	{"http-read-timeout", floodHTTPTimeout.String()},
	{"http-write-timeout", floodHTTPTimeout.String()},
}}

const (
	floodSize         = 20000
	floodClients      = 2
	floodDecideWithin = 5 * time.Second // a request at the bounds is cheap; a busy machine is slow
	floodHTTPTimeout  = time.Minute
)

func floodRequest(prefix string, n int) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: "hostile", Descriptors: make([]*rlpb.RateLimitDescriptor, n)}
	for i := range r.Descriptors {
		r.Descriptors[i] = desc("f", prefix+strconv.Itoa(i))
	}
	return r
}

func entriesRequest(n int) *pb.RateLimitRequest {
	kv := []string{"f", "entries"}
	for i := 1; i < n; i++ {
		kv = append(kv, "e"+strconv.Itoa(i), "x")
	}
	return &pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{desc(kv...)}}
}

func runFloods(t *testing.T, h *harness) {
	num := func(name, fallback string) int {
		s := bound(t, name, fallback)
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("--%s default %q: want a positive integer", name, s)
		}
		return n
	}
	maxDesc, maxEntries := num("max-descriptors", "16"), num("max-descriptor-entries", "16")
	t.Logf("bounds (defaults of sluice serve): --max-descriptors %d --max-descriptor-entries %d", maxDesc, maxEntries)

	conn, rls := h.p.hostileConn(t)
	// The floods are marshalled once and sent as they are: marshalling
	// 20,000 descriptors per call would take the suite's own CPU from the
	// probes.
	refusedRaw := func(what string, msg []byte, words []string) {
		ctx, cancel := rpcCtx(5 * time.Second)
		defer cancel()
		start := time.Now()
		var out []byte
		err := conn.Invoke(ctx, rlsPath, msg, &out, grpc.ForceCodec(rawCodec{}))
		st := status.Convert(err)
		switch {
		case st.Code() == codes.ResourceExhausted:
		case st.Code() == codes.InvalidArgument && namesAny(st.Message(), words):
		default:
			t.Errorf("gRPC %s: %v after %v, want InvalidArgument naming %v (or ResourceExhausted)", what, errOrOK(err), time.Since(start).Round(time.Millisecond), words)
		}
	}
	refused := func(what string, req *pb.RateLimitRequest, words []string) {
		msg, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		refusedRaw(what, msg, words)
	}
	decided := func(what string, req *pb.RateLimitRequest) {
		ctx, cancel := rpcCtx(5 * time.Second)
		defer cancel()
		start := time.Now()
		_, err := rls.ShouldRateLimit(ctx, req)
		took := time.Since(start)
		switch {
		case err != nil:
			t.Errorf("gRPC %s (at the bound): %v after %v, want a decision", what, err, took.Round(time.Millisecond))
		case took > floodDecideWithin:
			t.Errorf("gRPC %s (at the bound): decided in %v, want within %v", what, took.Round(time.Millisecond), floodDecideWithin)
		default:
			t.Logf("%s: decided in %v", what, took.Round(time.Microsecond))
		}
	}

	descWords, entryWords := []string{"descriptor"}, []string{"entries", "entry"}
	big, err := proto.Marshal(floodRequest("v", floodSize))
	if err != nil {
		t.Fatal(err)
	}
	wide, err := proto.Marshal(entriesRequest(floodSize))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for c := range floodClients {
		wg.Go(func() {
			for range 2 {
				refusedRaw(fmt.Sprintf("%d descriptors (client %d)", floodSize, c), big, descWords)
				refusedRaw(fmt.Sprintf("%d entries in one descriptor (client %d)", floodSize, c), wide, entryWords)
			}
		})
	}
	wg.Wait()
	refused(fmt.Sprintf("%d descriptors (--max-descriptors + 1)", maxDesc+1), floodRequest("p", maxDesc+1), descWords)
	refused(fmt.Sprintf("%d entries (--max-descriptor-entries + 1)", maxEntries+1), entriesRequest(maxEntries+1), entryWords)
	decided(fmt.Sprintf("%d descriptors (--max-descriptors)", maxDesc), floodRequest("b", maxDesc))
	decided(fmt.Sprintf("%d entries (--max-descriptor-entries)", maxEntries), entriesRequest(maxEntries))

	cl := hostileClient(floodHTTPTimeout)
	defer cl.CloseIdleConnections()
	jsonFlood := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"domain":"hostile","descriptors":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"entries":[{"key":"f","value":"j%d"}]}`, i)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	for _, n := range []int{floodSize, maxDesc + 1} {
		code, body, err := statusOf(cl.Post(h.p.httpURL("/json"), "application/json", strings.NewReader(jsonFlood(n))))
		switch {
		case err != nil:
			t.Errorf("POST /json with %d descriptors: no answer: %v", n, err)
		case code == 413 && n == floodSize:
		case code != 400 || !namesAny(body, descWords):
			t.Errorf("POST /json with %d descriptors: %d %s, want 400 naming descriptors", n, code, trim(body))
		}
	}
}
