package statsd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// patience bounds a wait for something the test made happen; reaching it
// is a failure, never a measure of speed.
const patience = 30 * time.Second

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := New(Options{Addr: l.Addr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(time.Second)
	s := NewSink(c, Plain{})
	s.Counter("a.total_hits", 3)
	s.Gauge("a.active", 1)
	s.Timer("a.response_time", 2)
	s.Flush()
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(patience))
	r := bufio.NewReader(conn)
	var got []string
	for range 3 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, line)
	}
	want := []string{"a.total_hits:3|c\n", "a.active:1|g\n", "a.response_time:2|ms\n"}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestUDPPackets: lines are packed into datagrams of at most MaxUDPPacket
// bytes, each holding whole lines.
func TestUDPPackets(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c, err := New(Options{Network: "udp", Addr: pc.LocalAddr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(time.Second)
	const n = 100
	var want bytes.Buffer
	for i := range n {
		line := fmt.Sprintf("ratelimit.service.rate_limit.domain%03d.key_value.total_hits:%d|c\n", i, i)
		want.WriteString(line)
		c.Write([]byte(line))
	}
	c.Flush()
	var got bytes.Buffer
	buf := make([]byte, 65536)
	_ = pc.SetReadDeadline(time.Now().Add(patience))
	for got.Len() < want.Len() {
		k, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got.Len(), err)
		}
		if k > MaxUDPPacket {
			t.Errorf("datagram of %d bytes, more than %d", k, MaxUDPPacket)
		}
		if buf[k-1] != '\n' {
			t.Errorf("datagram %q does not end a line", buf[:k])
		}
		got.Write(buf[:k])
	}
	if got.String() != want.String() {
		t.Errorf("lines received differ from those written:\n%s\nwant\n%s", got.String(), want.String())
	}
}

// TestQueueFull: while the server cannot be reached, lines wait up to
// MaxQueueBytes; past it they are dropped and counted, and Write never
// waits.
func TestQueueFull(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	down := func(string, string, time.Duration) (net.Conn, error) { return nil, errors.New("refused") }
	c, err := New(Options{Addr: "127.0.0.1:9", FlushInterval: time.Hour, Metrics: m, Dial: down})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 99) + "\n")
	per := MaxTCPPacket / len(line)        // lines per packet
	queued := MaxQueueBytes / MaxTCPPacket // packets the queue holds
	// The queue fills, a packet more fills, and the next line finds no
	// room for it: that packet's lines are dropped.
	for range (queued+1)*per + 1 {
		c.Write(line)
	}
	if got := testutil.ToFloat64(m.drops.WithLabelValues("queue_full")); got != float64(per) {
		t.Errorf("dropped %v lines, want %d (one packet)", got, per)
	}
	// Close finds the queue full for the last line, and the server
	// still down: what was queued is dropped.
	c.Close(0)
	if got := testutil.ToFloat64(m.drops.WithLabelValues("queue_full")); got != float64(per+1) {
		t.Errorf("dropped %v lines, want %d (a packet and the last line)", got, per+1)
	}
	if got := testutil.ToFloat64(m.drops.WithLabelValues("closed")); got != float64(queued*per) {
		t.Errorf("dropped at close %v, want %d", got, queued*per)
	}
	c.Write(line)
	if got := testutil.ToFloat64(m.drops.WithLabelValues("closed")); got != float64(queued*per+1) {
		t.Errorf("a line written after Close: dropped at close %v, want %d", got, queued*per+1)
	}
}

// TestRetryBackoff: a failed connection is tried again after RetryMin,
// then twice as long each time, up to RetryMax; once connected, what
// waited is sent.
func TestRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var (
			mu    sync.Mutex
			tries []time.Duration
		)
		server, client := net.Pipe()
		defer server.Close()
		dial := func(string, string, time.Duration) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			tries = append(tries, time.Since(start))
			if len(tries) < 8 {
				return nil, errors.New("refused")
			}
			return client, nil
		}
		c, err := New(Options{Addr: "127.0.0.1:9", FlushInterval: time.Hour, Dial: dial})
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("a:1|c\n"))
		c.Flush()
		got := make([]byte, 6)
		if _, err := server.Read(got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "a:1|c\n" {
			t.Errorf("read %q", got)
		}
		mu.Lock()
		want := []time.Duration{0, 100, 300, 700, 1500, 3100, 6100, 9100}
		for i := range want {
			want[i] *= time.Millisecond
		}
		if fmt.Sprint(tries) != fmt.Sprint(want) {
			t.Errorf("connection attempts at %v, want %v", tries, want)
		}
		mu.Unlock()
		go func() { _, _ = server.Read(make([]byte, 64)) }()
		c.Close(time.Second)
	})
}

// TestReconnect: when the server closes the connection, the client
// connects again and goes on sending.
func TestReconnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := New(Options{Addr: l.Addr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(time.Second)
	c.Write([]byte("first:1|c\n"))
	c.Flush()
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = first.SetReadDeadline(time.Now().Add(patience))
	if line, err := bufio.NewReader(first).ReadString('\n'); err != nil || line != "first:1|c\n" {
		t.Fatalf("first connection read %q, %v", line, err)
	}
	first.Close()
	// Keep writing until a line comes on a new connection: the writes
	// after the close fail, and the client connects again.
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := l.Accept()
		if err == nil {
			accepted <- conn
		}
	}()
	deadline := time.After(patience)
	for {
		c.Write([]byte("again:1|c\n"))
		c.Flush()
		select {
		case conn := <-accepted:
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(patience))
			if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "again:1|c\n" {
				t.Fatalf("second connection read %q, %v", line, err)
			}
			return
		case <-deadline:
			t.Fatal("no second connection")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, o := range []Options{{Network: "unix", Addr: "a:1"}, {Addr: "nohostport"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}
