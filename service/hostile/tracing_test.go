package hostile

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/service/tracing/otlptest"
)

// tracingClass: tracing on, to a collector that accepts 4 MiB a request
// (gRPC's default, and the OpenTelemetry collector's); the process traces
// only the calls that come sampled (--tracing-sample-ratio 0), and exports
// a batch when tracingBatch spans are queued.
//
//   - tracingBig calls, each of an unknown domain of tracingDomainBytes
//     and a sampled traceparent: while their spans wait in the queue, the
//     live heap (after a forced GC) grows by at most tracingHeapBound;
//   - then two normal calls, sampled, fill the batch: their spans reach
//     the collector (a batch over its limit is refused whole).
var tracingClass = class{
	name:  "tracing",
	flags: []flagArg{adminFlag, {"tracing-sample-ratio", "0"}},
	start: func(t *testing.T, flags []flagArg) *proc {
		r := otlptest.Start(t)
		tracingReceivers.Store(t, r)
		t.Cleanup(func() { tracingReceivers.Delete(t) })
		t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", fmt.Sprint(tracingBatch))
		t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // only a full batch is exported
		return start(t, append(flags, flagArg{"tracing-endpoint", "http://" + r.Addr}))
	},
	run: runTracing,
}

const (
	tracingBatch       = 64
	tracingBig         = tracingBatch - 4 // and two normal calls of two spans each
	tracingDomainBytes = 900 << 10
	tracingHeapBound   = 24 << 20
	tracingWithin      = 30 * time.Second
)

var tracingReceivers sync.Map // *testing.T -> *otlptest.Receiver

// traceparent is a sampled W3C traceparent of a new trace, and its id.
func traceparent() (header, traceID string) {
	var b [24]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:16])
	return "00-" + id + "-" + hex.EncodeToString(b[16:]) + "-01", id
}

func runTracing(t *testing.T, h *harness) {
	v, _ := tracingReceivers.Load(t)
	recv := v.(*otlptest.Receiver)
	_, rls := h.p.hostileConn(t)
	call := func(domain string, d *rlpb.RateLimitDescriptor) (string, error) {
		tp, id := traceparent()
		ctx, cancel := rpcCtx(probeHang * 5)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
		_, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlpb.RateLimitDescriptor{d}})
		return id, err
	}

	base := h.liveHeap()
	big := "unknown-" + strings.Repeat("d", tracingDomainBytes)
	for i := range tracingBig {
		if _, err := call(big, desc("k", "v")); err != nil {
			t.Fatalf("call %d of an unknown domain of %d bytes: %v", i, len(big), err)
		}
	}
	held := h.liveHeap() - base
	if held > tracingHeapBound {
		t.Errorf("%d traced calls of an unknown domain of %d bytes, their spans queued: the live heap grew by %s, want at most %s", tracingBig, len(big), mib(held), mib(tracingHeapBound))
	} else {
		t.Logf("%d traced calls of an unknown domain of %d bytes, spans queued: live heap %+.1f MiB", tracingBig, len(big), float64(held)/(1<<20))
	}

	var ids []string
	for i := range 2 {
		id, err := call("hostile", desc("probe", fmt.Sprint("traced-", i)))
		if err != nil {
			t.Fatalf("a traced normal call: %v", err)
		}
		ids = append(ids, id)
	}
	deadline := time.Now().Add(tracingWithin)
	for {
		missing := 0
		for _, id := range ids {
			found := false
			for _, s := range recv.Spans() {
				found = found || s.TraceID == id
			}
			if !found {
				missing++
			}
		}
		if missing == 0 {
			t.Logf("the batch of %d spans (%d of the long domain) reached the collector (%d exports)", tracingBatch, tracingBig, recv.Exports())
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the spans of %d of 2 normal calls, batched with %d spans of calls of a long domain, did not reach the collector within %v (a batch over its 4 MiB is refused whole)", missing, tracingBig, tracingWithin)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
