package hostile

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The transport bounds of commonFlags and of idleStreamsClass, as numbers.
const (
	maxStreams  = 100 // --grpc-max-concurrent-streams
	maxConns    = 64  // --max-connections, per listener
	connAge     = 2 * time.Second
	connAgeWait = time.Second     // --grpc-max-connection-age-grace
	idleMargin  = 5 * time.Second // generous: a check returns when the server closes
)

// idleStreamsClass: one raw HTTP/2 connection opens idleStreams
// ShouldRateLimit streams and never sends a message; another floods PINGs.
// The server refuses the streams past --grpc-max-concurrent-streams, holds
// no more goroutines than that, and closes the connection within
// --grpc-max-connection-age (+10% jitter) and its grace; the ping flood is
// answered with GOAWAY.
var idleStreamsClass = class{
	name: "idle-streams",
	flags: []flagArg{
		{"grpc-max-connection-age", connAge.String()},
		{"grpc-max-connection-age-grace", connAgeWait.String()},
	},
	peakGoroutines: maxStreams + 60,
	run:            runIdleStreams,
}

const idleStreams = 1000

func runIdleStreams(t *testing.T, h *harness) {
	streams, err := dialH2(h.p.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer streams.Close()
	pinger, err := dialH2(h.p.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pinger.Close()

	if err := streams.openStreams(idleStreams); err != nil {
		t.Errorf("opening %d streams: %v", idleStreams, err)
	}
	// The server answers the flood with GOAWAY and closes: a ping written
	// after that may fail (a reset) before the reader has seen the close,
	// so a write error is one only if the connection stays open.
	if err := pinger.pings(50); err != nil && !pinger.closedWithin(idleMargin) {
		t.Errorf("50 pings: %v, and the connection still open", err)
	}
	for deadline := time.Now().Add(2 * time.Second); streams.refused.Load() < idleStreams-maxStreams && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if r := streams.refused.Load(); r < idleStreams-maxStreams {
		t.Errorf("%d idle streams on one connection: the server refused %d, so it holds %d (want at most --grpc-max-concurrent-streams %d)", idleStreams, r, idleStreams-r, maxStreams)
	} else {
		t.Logf("%d idle streams on one connection: %d refused", idleStreams, r)
	}

	if !pinger.closedWithin(idleMargin) {
		t.Errorf("ping flood (50 pings, no streams): connection still open after %v, want GOAWAY ENHANCE_YOUR_CALM", idleMargin)
	} else if code := pinger.goAway.Load() - 1; code != int64(http2.ErrCodeEnhanceYourCalm) {
		t.Errorf("ping flood: connection closed with GOAWAY %v, want ENHANCE_YOUR_CALM", http2.ErrCode(code))
	}

	bound := connAge + connAge/10 + connAgeWait + idleMargin
	if streams.closedWithin(bound) {
		t.Logf("connection with idle streams closed by the server after %v (GOAWAY %v)", streams.closedAt.Sub(streams.opened).Round(time.Millisecond), http2.ErrCode(streams.goAway.Load()-1))
	} else {
		t.Errorf("connection with idle streams still open %v after it was opened, want closed within --grpc-max-connection-age %v + grace %v (+ %v)", bound, connAge, connAgeWait, idleMargin)
	}
}

// idleConnsClass: idleConnCount TCP connections to each listener that
// never send a byte, beyond --max-connections. The cap holds (goroutines
// rise by at most the cap per listener), the HTTP listener closes the idle
// connections it accepted within --http-read-header-timeout and the gRPC
// listener within --grpc-handshake-timeout, and the
// probes, on connections opened before, keep answering.
var idleConnsClass = class{
	name:           "idle-conns",
	peakGoroutines: idleConnsPeak,
	run:            runIdleConns,
}

const (
	idleConnCount = 200
	idleConnsPeak = 2*maxConns + 60 // the cap on each listener, and room for the probes
)

func runIdleConns(t *testing.T, h *harness) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	opened := time.Now()
	for _, addr := range []string{h.p.httpAddr, h.p.grpcAddr} {
		for i := range idleConnCount {
			c, err := net.DialTimeout("tcp", addr, dialTimeout)
			if err != nil {
				t.Fatalf("idle connection %d to %s: %v", i, addr, err)
			}
			conns = append(conns, c)
		}
	}
	bound := time.Second + idleMargin
	var closedHTTP, closedGRPC atomic.Int64
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			if !serverClosedBy(c, io.Discard, opened.Add(bound)) {
				return
			}
			if i < idleConnCount {
				closedHTTP.Add(1)
			} else {
				closedGRPC.Add(1)
			}
		})
	}
	wg.Wait()
	if n := closedGRPC.Load(); n < maxConns {
		t.Errorf("%d idle gRPC connections (no HTTP/2 preface): the server closed %d within --grpc-handshake-timeout 1s + %v, want at least the %d it may hold (--max-connections)", idleConnCount, n, idleMargin, maxConns)
	} else {
		t.Logf("%d idle gRPC connections (no HTTP/2 preface): %d closed by the server within %v", idleConnCount, n, bound)
	}
	if n := closedHTTP.Load(); n < maxConns {
		t.Errorf("%d idle HTTP connections: the server closed %d within --http-read-header-timeout 1s + %v, want at least the %d it may hold (--max-connections)", idleConnCount, n, idleMargin, maxConns)
	} else {
		t.Logf("%d idle HTTP connections: %d closed by the server within %v", idleConnCount, n, bound)
	}
	t.Logf("%d idle TCP connections to each listener held for %v (goroutine bound +%d)", idleConnCount, time.Since(opened).Round(time.Millisecond), idleConnsPeak)
}
