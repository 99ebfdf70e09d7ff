package memcachestore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/validate"
)

// FuzzReply feeds arbitrary server bytes to the store's reply reader:
// each byte of script is a call (AllowN, a peek, Reserve, Return, Reset
// or Ping on one of the algorithms), and reply is everything the server
// sends, in reads of chunk bytes, over connections that read it in turn
// (a connection closed after a failure loses what it had read ahead; the
// next one reads on). It checks that no reply panics the store, that the
// store reads a bounded amount per command it sends (a line of maxLine,
// a value of maxValue), that every failure is one of the errors a server
// can cause (ServerError, ValueError, a protocol error, the stream's end,
// ErrNoCAS, ErrContended) of bounded size, that a decision made is a
// sane one, that no connection is left open after Close, and that the
// values the store decodes encode back to themselves.
func FuzzReply(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.script, s.reply, s.chunk)
	}
	f.Fuzz(func(t *testing.T, script, reply []byte, chunk uint8) {
		checkValues(t, reply)
		if len(script) > 8 {
			script = script[:8] // a call reads at most a few KB: 8 keep an exec short
		}
		src := &fuzzStream{r: bytes.NewReader(reply), chunk: max(int(chunk), 1)}
		s := fuzzStore(t, src)
		for _, b := range script {
			c := fuzzCallOf(b)
			d, err := c.run(s)
			if err != nil {
				checkErr(t, c, err)
				continue
			}
			if c.decides() {
				checkDecision(t, c, d)
			}
		}
		s.Close()
		for i, c := range src.conns {
			if !c.closed {
				t.Errorf("connection %d left open after Close", i)
			}
			// Per command: a line, a value and its "\r\n", a line; and
			// up to a buffer (maxLine) read ahead. Nothing is read
			// before a command.
			limit := c.writes*(2*maxLine+maxValue+2) + maxLine
			if c.writes == 0 && c.read > 0 || c.read > limit {
				t.Errorf("connection %d read %d bytes for %d commands, more than %d", i, c.read, c.writes, limit)
			}
		}
	})
}

// fuzzNow is the time of every decision of FuzzReply: the item names of
// the seeds are those of this time.
var fuzzNow = time.Date(2026, 1, 2, 3, 4, 5, 678_000, time.UTC)

// fuzzStore is a Store whose one server's connections read src.
func fuzzStore(t *testing.T, src *fuzzStream) *Store {
	s, err := New(context.Background(), Options{Servers: []string{"memcached.invalid:11211"}, Clock: func() time.Time { return fuzzNow }})
	if err != nil {
		t.Fatal(err)
	}
	s.ring.Load().servers[0].dialer = func(context.Context) (net.Conn, error) { return src.dial(), nil }
	return s
}

// fuzzStream is what the server sends, read by its connections in turn.
type fuzzStream struct {
	r     *bytes.Reader
	chunk int // the most one Read returns
	conns []*fuzzConn
}

func (s *fuzzStream) dial() *fuzzConn {
	c := &fuzzConn{s: s}
	s.conns = append(s.conns, c)
	return c
}

// fuzzConn is a connection to the fuzzed server: what the store writes
// is counted and dropped, what it reads comes from the stream.
type fuzzConn struct {
	net.Conn // nil: the methods the store uses are below
	s        *fuzzStream
	read     int // bytes read
	writes   int // commands written (one write each)
	closed   bool
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	n, err := c.s.r.Read(p[:min(len(p), c.s.chunk)])
	c.read += n
	return n, err
}

func (c *fuzzConn) Write(p []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	c.writes++
	return len(p), nil
}

func (c *fuzzConn) Close() error                     { c.closed = true; return nil }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// The calls of FuzzReply.
const (
	kindAllow    = iota // AllowN(1)
	kindPeek            // AllowN(0)
	kindReserve         // Reserve(2)
	kindReturn          // Return(1) as of now
	kindReturnAt        // Return(2) admitted a second ago
	kindReset
	kindPing
	kindAllowMany // AllowN(3)
)

type fuzzCall struct {
	kind int
	lim  sluice.Limit
	n    int
}

// fuzzLimits are the limits of the calls: whole seconds (names in base
// 36), a period in µs, a large rate, and a period whose states outlive
// memcached's 30 days of relative expiry.
var fuzzLimits = []sluice.Limit{
	{Rate: 10, Period: time.Second},
	{Rate: 3, Period: 1500 * time.Millisecond},
	{Rate: 1 << 20, Period: time.Hour}, // a sliding window's Rate × Period stays below 2^53 µs
	{Rate: 3, Period: 60 * 24 * time.Hour},
}

var fuzzAlgorithms = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA}

// fuzzCallOf is the call of b: bits 0-1 the algorithm, 2-4 the kind, 5
// counting every hit, 6-7 the limit.
func fuzzCallOf(b byte) fuzzCall {
	c := fuzzCall{kind: int(b>>2) & 7, lim: fuzzLimits[b>>6]}
	c.lim.Algorithm = fuzzAlgorithms[b&3]
	if b&0x20 != 0 {
		c.lim.Counting = sluice.CountAll
	}
	if c.lim.Algorithm == sluice.TokenBucket || c.lim.Algorithm == sluice.GCRA {
		c.lim.Burst = 5
	}
	c.n = [8]int{1, 0, 2, 1, 2, 0, 0, 3}[c.kind]
	return c
}

// decides reports whether c returns a decision.
func (c fuzzCall) decides() bool {
	return c.kind == kindAllow || c.kind == kindPeek || c.kind == kindReserve || c.kind == kindAllowMany
}

func (c fuzzCall) run(s *Store) (sluice.Decision, error) {
	ctx := context.Background()
	switch c.kind {
	case kindReturn:
		return sluice.Decision{}, s.Return(ctx, "k", c.lim, c.n, time.Time{})
	case kindReturnAt:
		return sluice.Decision{}, s.Return(ctx, "k", c.lim, c.n, fuzzNow.Add(-time.Second))
	case kindReset:
		return sluice.Decision{}, s.Reset(ctx, "k", c.lim)
	case kindPing:
		return sluice.Decision{}, s.Ping(ctx)
	case kindReserve:
		d, _, err := s.Reserve(ctx, "k", c.lim, c.n)
		return d, err
	}
	return s.AllowN(ctx, "k", c.lim, c.n)
}

// checkErr fails unless err is an error a server can cause, of bounded
// size.
func checkErr(t *testing.T, c fuzzCall, err error) {
	t.Helper()
	var se *ServerError
	var ve *ValueError
	switch {
	case errors.As(err, &se):
		if len(se.Reply) > maxLine-2 || strings.ContainsAny(se.Reply, "\n") {
			t.Errorf("%+v: ServerError with a reply of %d bytes: %q", c, len(se.Reply), se.Reply)
		}
	case errors.As(err, &ve):
		if len(ve.Reason) > 4*maxValue+100 {
			t.Errorf("%+v: ValueError with a reason of %d bytes", c, len(ve.Reason))
		}
	case errors.Is(err, errProtocol), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, ErrNoCAS), errors.Is(err, ErrContended):
	default:
		t.Errorf("%+v: error %v (%T): not one a server causes", c, err, err)
	}
	if n := len(err.Error()); n > 5*maxLine {
		t.Errorf("%+v: an error of %d bytes", c, n)
	}
}

// checkDecision fails unless d is a decision of c's limit with sane
// figures.
func checkDecision(t *testing.T, c fuzzCall, d sluice.Decision) {
	t.Helper()
	if d.Limit != c.lim || d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 || d.Allowed && d.RetryAfter != 0 {
		t.Errorf("%+v: decision %+v", c, d)
	}
}

// checkValues decodes v as each kind of state and checks that what
// decodes encodes back to the same state.
func checkValues(t *testing.T, v []byte) {
	t.Helper()
	if n, ok := decodeCount(v); ok {
		if m, ok2 := decodeCount(strconv.AppendInt(nil, n, 10)); !ok2 || m != n || n < 0 {
			t.Errorf("count %q = %d, encoded back %d, %v", v, n, m, ok2)
		}
	}
	if c, ok := decodeCounter(v); ok {
		if c2, ok2 := decodeCounter(appendCounter(nil, c)); !ok2 || c2 != c || c.Prev < 0 || c.Cur < 0 {
			t.Errorf("counter %q = %+v, encoded back %+v, %v", v, c, c2, ok2)
		}
	}
	if a, ok := decodeTAT(v); ok {
		if a2, ok2 := decodeTAT(appendTAT(nil, a)); !ok2 || a2 != a || a.Frac < 0 {
			t.Errorf("TAT %q = %+v, encoded back %+v, %v", v, a, a2, ok2)
		}
	}
}

type fuzzSeed struct {
	script, reply []byte
	chunk         uint8
}

// fuzzSeeds are replies of a memcached as the store meets them, and
// the ones it must refuse.
func fuzzSeeds(f *testing.F) []fuzzSeed {
	s, err := New(context.Background(), Options{Servers: []string{"memcached.invalid:11211"}, Clock: func() time.Time { return fuzzNow }})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	for b := range 256 {
		if c := fuzzCallOf(byte(b)); validate.Request("k", c.lim, c.n) != nil {
			f.Fatalf("script byte %d: %+v: %v", b, c, validate.Request("k", c.lim, c.n))
		}
	}
	now := fuzzNow.UnixMicro()
	// call is the script byte of (algorithm, kind, count all, limit);
	// name the item name of its state.
	call := func(alg, kind int, all bool, lim int) byte {
		b := byte(alg | kind<<2 | lim<<6)
		if all {
			b |= 0x20
		}
		return b
	}
	name := func(b byte) string {
		c := fuzzCallOf(b)
		o := op{lim: c.lim, p: params(c.lim), now: now}
		n, err := s.name(nil, "k", &o)
		if err != nil {
			f.Fatal(err)
		}
		return string(n)
	}
	value := func(b byte, v string, unique int) string {
		r := "VALUE " + name(b) + " 0 " + strconv.Itoa(len(v))
		if unique > 0 {
			r += " " + strconv.Itoa(unique)
		}
		return r + "\r\n" + v + "\r\nEND\r\n"
	}
	seed := func(chunk uint8, script []byte, reply ...string) fuzzSeed {
		return fuzzSeed{script: script, reply: []byte(strings.Join(reply, "")), chunk: chunk}
	}
	fw := call(0, kindAllow, false, 0)
	sw := call(1, kindAllow, false, 1)
	tb := call(2, kindAllow, false, 2)
	gc := call(3, kindReserve, false, 3)
	charge := call(0, kindAllow, true, 0)
	nowS := strconv.FormatInt(now, 10)
	return []fuzzSeed{
		seed(255, []byte{call(0, kindPing, false, 0)}, "VERSION 1.6.21\r\n"),
		// Decisions: a first one (add), then on a state (gets, cas).
		seed(255, []byte{fw, fw}, "END\r\n", "STORED\r\n", value(fw, "1", 7), "STORED\r\n"),
		seed(255, []byte{sw, sw}, "END\r\n", "STORED\r\n", value(sw, nowS+":2:1", 9), "STORED\r\n"),
		seed(3, []byte{tb, gc}, value(tb, nowS, 3), "EXISTS\r\n", value(tb, nowS+":1", 4), "STORED\r\n",
			value(gc, strconv.FormatInt(now+10_000_000, 10), 5)),
		// Counting every hit: incr, padded by decr, and add when absent.
		seed(1, []byte{charge, charge, call(0, kindReturn, false, 0)}, "NOT_FOUND\r\n", "NOT_STORED\r\n", "2\r\n",
			"12        \r\n", "3\r\n"),
		// A peek, a Return at a time, a Reset.
		seed(255, []byte{call(1, kindPeek, false, 1), call(3, kindReturnAt, false, 0), call(1, kindReset, false, 1)},
			value(call(1, kindPeek, false, 1), "-5:0:0", 0), value(call(3, kindReturnAt, false, 0), "9223372036854775807:2", 1),
			"STORED\r\n", "DELETED\r\n"),
		// Errors of the server, states of another application, damaged
		// streams.
		seed(255, []byte{fw, sw}, "SERVER_ERROR out of memory storing object\r\n", "ERROR\r\n"),
		seed(255, []byte{gc, gc}, value(gc, "not a state", 2), "CLIENT_ERROR bad data chunk\r\n"),
		seed(255, []byte{tb}, value(tb, strings.Repeat("9", maxValue), 1)),
		seed(255, []byte{tb}, value(tb, strings.Repeat("9", maxValue+1), 1)),
		seed(255, []byte{gc}, value(gc, "1", 0)),
		seed(255, []byte{fw}, "VALUE "+name(fw)+" 0 1 7\r\n1\r\nXEND\r\n"),
		seed(255, []byte{fw}, "VALUE other 0 1 7\r\n1\r\nEND\r\n"),
		seed(255, []byte{fw}, "VALUE "+name(fw)+" 0 18446744073709551616 7\r\n"),
		seed(255, []byte{fw}, "END\n"),
		seed(7, []byte{fw, fw}, strings.Repeat("x", maxLine+1)+"\r\n", "END\r\n"),
		seed(255, []byte{fw, fw, fw}, value(fw, "2", 1)[:20]),
		seed(255, []byte{charge}, "18446744073709551615\r\n", "5\r\n"),
	}
}
