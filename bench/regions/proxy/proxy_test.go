package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo is a loopback echo server that records when each connection first
// received a byte.
type echo struct {
	ln    net.Listener
	mu    sync.Mutex
	first []time.Time
	wg    sync.WaitGroup
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				seen := false
				for {
					n, err := c.Read(buf)
					if n > 0 && !seen {
						seen = true
						e.mu.Lock()
						e.first = append(e.first, time.Now())
						e.mu.Unlock()
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); e.wg.Wait() })
	return e
}

func (e *echo) firsts() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.first...)
}

func listen(t *testing.T, target string, cfg Config) *Link {
	t.Helper()
	l, err := Listen(target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, l *Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back, failing after a generous
// deadline (a safety net against a hang, not a timing assertion).
func roundTrip(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("read %q, want %q", buf, msg)
	}
	return nil
}

func TestRoundTripTakesAtLeastRTT(t *testing.T) {
	e := startEcho(t)
	const rtt = 40 * time.Millisecond
	l := listen(t, e.ln.Addr().String(), Config{RTT: rtt, Jitter: 5 * time.Millisecond, Seed: 1})
	c := dial(t, l)
	for i := range 5 {
		start := time.Now()
		if err := roundTrip(c, fmt.Sprintf("ping %d", i)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < rtt {
			t.Errorf("round trip %d took %v, less than the link's RTT %v", i, d, rtt)
		}
	}
	st := l.Stats()
	if st.ChunksUp < 5 || st.DeliveredUp != st.ChunksUp || st.BytesUp != st.BytesDown {
		t.Errorf("Stats() = %+v, want 5+ chunks up, all delivered, as many bytes each way", st)
	}
}

// With jitter larger than the gap between writes, chunks are still
// delivered in order.
func TestJitterKeepsOrder(t *testing.T) {
	e := startEcho(t)
	l := listen(t, e.ln.Addr().String(), Config{RTT: 2 * time.Millisecond, Jitter: 20 * time.Millisecond, Seed: 7})
	c := dial(t, l)
	var want bytes.Buffer
	go func() {
		for i := range 300 {
			fmt.Fprintf(c, "%d\n", i)
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	for i := range 300 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("echo out of order:\n%s", got)
	}
}

// A black hole delivers nothing until the heal: what was sent during it
// reaches the target only after Heal, and then arrives.
func TestBlackHoleHoldsUntilHeal(t *testing.T) {
	e := startEcho(t)
	l := listen(t, e.ln.Addr().String(), Config{RTT: 10 * time.Millisecond})
	c := dial(t, l)
	if err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	delivered := l.Stats().DeliveredUp
	l.SetState(BlackHole)
	c2 := dial(t, l) // a connection opened during the black hole
	for _, cc := range []net.Conn{c, c2} {
		if _, err := io.WriteString(cc, "held"); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing can have crossed: give the link every chance to leak.
	time.Sleep(100 * time.Millisecond)
	if st := l.Stats(); st.DeliveredUp != delivered {
		t.Fatalf("during the black hole %d chunks were delivered to the target", st.DeliveredUp-delivered)
	}
	healed := time.Now()
	l.SetState(Up)
	for _, cc := range []net.Conn{c, c2} {
		cc.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(cc, buf); err != nil || string(buf) != "held" {
			t.Fatalf("after the heal read %q, %v; want \"held\"", buf, err)
		}
	}
	f := e.firsts()
	if len(f) != 2 || f[1].Before(healed) {
		t.Errorf("the black-holed connection's first byte reached the target at %v, before the heal at %v", f, healed)
	}
}

// A cut resets open connections, and resets new ones until the heal.
func TestCutResets(t *testing.T) {
	e := startEcho(t)
	l := listen(t, e.ln.Addr().String(), Config{RTT: 10 * time.Millisecond})
	c := dial(t, l)
	if err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	l.SetState(Cut)
	if err := roundTrip(c, "after"); err == nil || isTimeout(err) {
		t.Fatalf("round trip on a cut link: %v, want a reset", err)
	}
	// A new connection is reset: at the dial, or at its first round trip.
	c2, err := net.Dial("tcp", l.Addr())
	if err == nil {
		err = roundTrip(c2, "new")
		c2.Close()
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("new connection on a cut link: %v, want a reset", err)
	}
	if st := l.Stats(); st.Resets < 2 {
		t.Errorf("Resets = %d, want 2", st.Resets)
	}
	l.SetState(Up)
	if err := roundTrip(dial(t, l), "healed"); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func TestLossDelaysByRetransmit(t *testing.T) {
	e := startEcho(t)
	const rtt, rto = 10 * time.Millisecond, 50 * time.Millisecond
	l := listen(t, e.ln.Addr().String(), Config{RTT: rtt, Loss: 1, Retransmit: rto})
	c := dial(t, l)
	start := time.Now()
	if err := roundTrip(c, "x"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < rtt+2*rto {
		t.Errorf("a round trip with both chunks lost took %v, want >= %v", d, rtt+2*rto)
	}
	if st := l.Stats(); st.Lost != 2 {
		t.Errorf("Lost = %d, want 2", st.Lost)
	}
}

func TestResetProbability(t *testing.T) {
	e := startEcho(t)
	l := listen(t, e.ln.Addr().String(), Config{Reset: 1})
	if err := roundTrip(dial(t, l), "x"); err == nil || isTimeout(err) {
		t.Fatalf("round trip with Reset 1: %v, want a reset", err)
	}
}

func TestConfigBounds(t *testing.T) {
	tests := []struct {
		give Config
		want string
	}{
		{Config{RTT: -1}, "RTT"},
		{Config{RTT: MaxRTT + 1}, "RTT"},
		{Config{Jitter: -1}, "Jitter"},
		{Config{Loss: 1.5}, "Loss"},
		{Config{Retransmit: -1}, "Retransmit"},
		{Config{Reset: -0.1}, "Reset"},
	}
	for _, tt := range tests {
		if _, err := Listen("127.0.0.1:1", tt.give); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Listen(%+v) = %v, want an error naming %s", tt.give, err, tt.want)
		}
	}
	for _, target := range []string{"10.0.0.1:80", "example.com:80", "nohost"} {
		if _, err := Listen(target, Config{}); err == nil {
			t.Errorf("Listen(%q) = nil error, want a refusal of a target that is not loopback", target)
		}
	}
}

func TestParseState(t *testing.T) {
	for _, s := range []State{Up, Cut, BlackHole} {
		if got, err := ParseState(s.String()); err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseState("down"); err == nil {
		t.Error(`ParseState("down") = nil error`)
	}
}
