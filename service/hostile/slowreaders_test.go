package hostile

import (
	"bytes"
	benc "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
)

// adminSlowClass: clients that send requests and never read the answers,
// on the admin listener (which has no --http-write-timeout, for profiles)
// and on the gRPC listener (which had no write deadline at all).
//
//   - admin: slowReaderSlots connections (every slot of the admin listener,
//     --max-connections) each
//     pipeline slowAdminReqs GET /metrics and read nothing; within
//     --conn-write-timeout (1s) + writeStallMargin a scrape on a new
//     connection is answered;
//   - grpc: one HTTP/2 connection that opens the largest flow-control
//     windows sends slowGRPCReqs ShouldRateLimit calls of 16 descriptors
//     and reads nothing: the server closes it within --conn-write-timeout
//   - writeStallMargin of the end of its sending.
var adminSlowClass = class{
	name: "slow-readers",
	// Fewer slots than the other classes', so that filling each costs the
	// machine less.
	flags: []flagArg{adminFlag, {"conn-write-timeout", connWriteTimeout.String()}, {"max-connections", fmt.Sprint(slowReaderSlots)}},
	run:   runSlowReaders,
}

const (
	connWriteTimeout = time.Second
	writeStallMargin = 10 * time.Second
	slowAdminReqs    = 100
	slowReaderSlots  = 16 // --max-connections of the class
	slowGRPCReqs     = 200
)

// smallWindowDial connects with the smallest segments and receive buffer,
// so that the server's socket buffers, sized by them, hold some tens of
// KB rather than the MBs of loopback's 64 KB segments: a few answers fill
// them.
func smallWindowDial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 536); serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return d.Dial("tcp", addr)
}

func runSlowReaders(t *testing.T, h *harness) {
	// Each connection pipelines its requests, whose answers (problems
	// quoting the 2 KB path) fill its socket buffers, and reads nothing.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	reqs := strings.Repeat("GET /"+strings.Repeat("s", 2000)+" HTTP/1.1\r\nHost: sluice\r\n\r\n", slowAdminReqs)
	var wg sync.WaitGroup
	for range slowReaderSlots {
		c, err := smallWindowDial(h.p.admin)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			c.Write([]byte(reqs))
		})
	}
	wg.Wait()
	sent := time.Now()
	grpcDone := make(chan string, 1)
	// At once, on the gRPC listener.
	go func() { grpcDone <- slowGRPCReader(h.p.grpcAddr) }()

	within := connWriteTimeout + writeStallMargin
	if took, err := scrapeWithin(h.p.admin, within); err != nil {
		t.Errorf("%d admin connections (every slot) pipelining %d requests each and reading nothing: no scrape on a new connection answered within %v of their sending (--conn-write-timeout %v + %v): %v", slowReaderSlots, slowAdminReqs, within, connWriteTimeout, writeStallMargin, err)
	} else {
		t.Logf("%d admin connections (every slot) that never read: a new scrape answered %v after their requests were sent", slowReaderSlots, took.Sub(sent).Round(time.Millisecond))
	}
	if msg := <-grpcDone; msg != "" {
		t.Error(msg)
	}
}

// scrapeWithin asks GET /metrics of the admin listener on new connections
// until one is answered 200, for at most within; it returns when.
func scrapeWithin(addr string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		cl := hostileClient(probeHang)
		code, _, err := statusOf(cl.Get("http://" + addr + "/metrics"))
		cl.CloseIdleConnections()
		if err == nil && code == http.StatusOK {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the last: status %d, %v", code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reflectionPath is gRPC server reflection's stream, whose answers to
// file_by_filename are a file descriptor of some KB each.
const reflectionPath = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"

// slowGRPCReader opens one reflection stream, with the largest windows,
// sends slowGRPCReqs requests for a file of 7 KB on it and reads nothing;
// it returns "" when the server closed the connection within
// connWriteTimeout + writeStallMargin of the end of the sending, else
// what went wrong.
func slowGRPCReader(addr string) string {
	nc, err := smallWindowDial(addr)
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	fr := http2.NewFramer(nc, nc)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for _, hf := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", reflectionPath}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	req, _ := proto.Marshal(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: "envoy/config/core/v3/base.proto"}})
	msg := make([]byte, 5, 5+len(req))
	benc.BigEndian.PutUint32(msg[1:], uint32(len(req)))
	msg = append(msg, req...)
	nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	nc.Write([]byte(http2.ClientPreface))
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	fr.WriteWindowUpdate(0, 1<<31-1-65535)
	fr.WriteSettingsAck() // the server's SETTINGS, unread, are taken as they come
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hbuf.Bytes(), EndHeaders: true})
	// At most the stream's initial window (64 KiB) of requests.
	for range slowGRPCReqs {
		if fr.WriteData(1, false, msg) != nil {
			break // the server closed the connection: what follows sees it
		}
	}
	// Read nothing until the bound has passed; then what is left to read
	// (what the socket buffers held) must end in EOF: a server without a
	// write deadline serves the rest once the client reads, then waits.
	within := connWriteTimeout + writeStallMargin
	time.Sleep(within)
	nc.SetReadDeadline(time.Now().Add(slowReaderDrain))
	n, err := io.Copy(io.Discard, nc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Sprintf("a gRPC client that asked %d reflection answers of 7 KB on one stream and read nothing: the connection was still served %v after the sending ended (read %d bytes in %v, no EOF; want closed within --conn-write-timeout %v + %v)", slowGRPCReqs, within, n, slowReaderDrain, connWriteTimeout, writeStallMargin)
	}
	return ""
}
