// Package proxy is a TCP proxy on loopback that plays a wide-area link:
// it adds a round-trip time with jitter to every byte it carries, can lose
// segments (as a delay, the way TCP retransmits them, or as a reset), and
// can be partitioned and healed.
//
// A Link listens on 127.0.0.1 and forwards each connection to one target.
// Each direction of a connection is a queue: a chunk read from one side is
// written to the other after RTT/2 plus a uniform jitter in [0, Jitter),
// never before an earlier chunk of the same direction (TCP delivers in
// order, so a late chunk delays those behind it).
//
// Partitions:
//
//   - Cut: every open connection is reset (RST), and new ones are accepted
//     and reset at once, as a link whose far side answers with resets.
//   - BlackHole: nothing is delivered, in either direction, and new
//     connections are accepted but carry nothing: what is sent waits in the
//     link. At Heal it is delivered (after the one-way delay from the heal),
//     as TCP's retransmissions deliver what a short outage held. A
//     direction holds at most MaxQueued bytes; past that the link stops
//     reading that side, as a full TCP window does.
//
// The Link counts what it carries (Stats): connections, chunks and bytes
// per direction, resets, chunks lost and held.
package proxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// State is a link's condition.
type State int32

// The states of a link.
const (
	Up State = iota
	Cut
	BlackHole
)

func (s State) String() string {
	switch s {
	case Up:
		return "up"
	case Cut:
		return "cut"
	case BlackHole:
		return "black-hole"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ParseState parses "up", "cut" or "black-hole".
func ParseState(s string) (State, error) {
	for _, st := range []State{Up, Cut, BlackHole} {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("proxy: unknown link state %q (want up, cut or black-hole)", s)
}

// Bounds of a Config.
const (
	MaxRTT       = 10 * time.Second
	MaxJitter    = 10 * time.Second
	MaxQueued    = 16 << 20 // bytes held per direction of a connection
	chunkSize    = 32 << 10
	defaultRetry = 200 * time.Millisecond // Linux's minimum retransmission timeout
)

// Config is a link's behaviour.
type Config struct {
	// RTT is the round-trip time the link adds (RTT/2 each way), in
	// [0, MaxRTT].
	RTT time.Duration
	// Jitter adds a uniform [0, Jitter) to each chunk's one-way delay, in
	// [0, MaxJitter].
	Jitter time.Duration
	// Loss is the probability in [0, 1] that a chunk is lost and delivered
	// Retransmit later (by then, with the chunks queued behind it).
	Loss float64
	// Retransmit is the delay of a lost chunk (0 means 200 ms, Linux's
	// minimum retransmission timeout), in [0, MaxRTT].
	Retransmit time.Duration
	// Reset is the probability in [0, 1] that a chunk resets its
	// connection instead of being delivered.
	Reset float64
	// Seed makes the jitter, losses and resets repeatable.
	Seed uint64
}

// Validate reports the first field out of its bounds.
func (c Config) Validate() error {
	switch {
	case c.RTT < 0 || c.RTT > MaxRTT:
		return fmt.Errorf("proxy: RTT %v not in [0, %v]", c.RTT, MaxRTT)
	case c.Jitter < 0 || c.Jitter > MaxJitter:
		return fmt.Errorf("proxy: Jitter %v not in [0, %v]", c.Jitter, MaxJitter)
	case !(c.Loss >= 0 && c.Loss <= 1):
		return fmt.Errorf("proxy: Loss %v not in [0, 1]", c.Loss)
	case c.Retransmit < 0 || c.Retransmit > MaxRTT:
		return fmt.Errorf("proxy: Retransmit %v not in [0, %v]", c.Retransmit, MaxRTT)
	case !(c.Reset >= 0 && c.Reset <= 1):
		return fmt.Errorf("proxy: Reset %v not in [0, 1]", c.Reset)
	}
	return nil
}

// Stats counts what a link carried. Up is the client-to-target direction
// (requests), Down the other (replies).
type Stats struct {
	Conns         int64 // connections accepted
	Resets        int64 // connections reset: by Cut, by the Reset probability, or refused while cut
	ChunksUp      int64 // chunks read from clients (a chunk is one read: a write of the client, or several)
	ChunksDown    int64
	BytesUp       int64 // bytes delivered to the target
	BytesDown     int64 // bytes delivered to clients
	Lost          int64 // chunks delayed by Retransmit
	HeldUp        int64 // chunks that waited for a heal
	DeliveredUp   int64 // chunks delivered to the target
	DeliveredDown int64 // chunks delivered to clients
}

// Link is one proxied link. It is safe for concurrent use.
type Link struct {
	cfg    Config
	target string
	ln     net.Listener

	state atomic.Int32

	mu     sync.Mutex
	rng    *rand.Rand
	conns  map[*conn]struct{}
	healed chan struct{} // closed at the next change of state
	closed bool

	wg sync.WaitGroup

	nconns, resets, chunksUp, chunksDown, bytesUp, bytesDown, lost, heldUp, deliveredUp, deliveredDown atomic.Int64
}

// Listen starts a link on a free loopback port that forwards to target
// (a loopback address).
func Listen(target string, cfg Config) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := loopback(target); err != nil {
		return nil, err
	}
	if cfg.Retransmit == 0 {
		cfg.Retransmit = defaultRetry
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	l := &Link{
		cfg: cfg, target: target, ln: ln,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		conns:  map[*conn]struct{}{},
		healed: make(chan struct{}),
	}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// loopback refuses a target that is not a loopback IP address.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("proxy: target %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("proxy: target %q is not a loopback IP address", addr)
	}
	return nil
}

// Addr is the address clients dial.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// State returns the link's state.
func (l *Link) State() State { return State(l.state.Load()) }

// SetState partitions (Cut, BlackHole) or heals (Up) the link. Cut resets
// every open connection before it returns.
func (l *Link) SetState(s State) {
	l.mu.Lock()
	l.state.Store(int32(s))
	close(l.healed)
	l.healed = make(chan struct{})
	var reset []*conn
	if s == Cut {
		for c := range l.conns {
			reset = append(reset, c)
		}
	}
	l.mu.Unlock()
	for _, c := range reset {
		l.resets.Add(1)
		c.reset()
	}
}

// changed returns a channel closed at the next change of state.
func (l *Link) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healed
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	return Stats{
		Conns: l.nconns.Load(), Resets: l.resets.Load(),
		ChunksUp: l.chunksUp.Load(), ChunksDown: l.chunksDown.Load(),
		BytesUp: l.bytesUp.Load(), BytesDown: l.bytesDown.Load(),
		Lost: l.lost.Load(), HeldUp: l.heldUp.Load(),
		DeliveredUp: l.deliveredUp.Load(), DeliveredDown: l.deliveredDown.Load(),
	}
}

// Close stops accepting, resets every connection and waits for the link's
// goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var all []*conn
	for c := range l.conns {
		all = append(all, c)
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for _, c := range all {
		c.reset()
	}
	l.wg.Wait()
	return err
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		cc, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.nconns.Add(1)
		if l.State() == Cut {
			l.resets.Add(1)
			resetConn(cc)
			continue
		}
		l.wg.Add(1)
		go l.serve(cc)
	}
}

// resetConn closes c with an RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// conn is one proxied connection: client side, target side, and a queue
// per direction.
type conn struct {
	l              *Link
	client, target net.Conn
	once           sync.Once
	done           chan struct{}
}

func (c *conn) reset() {
	c.once.Do(func() {
		close(c.done)
		resetConn(c.client)
		if c.target != nil {
			resetConn(c.target)
		}
	})
}

func (l *Link) serve(cc net.Conn) {
	defer l.wg.Done()
	tc, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		l.resets.Add(1)
		resetConn(cc)
		return
	}
	c := &conn{l: l, client: cc, target: tc, done: make(chan struct{})}
	l.mu.Lock()
	if l.closed || l.State() == Cut {
		l.mu.Unlock()
		l.resets.Add(1)
		c.reset()
		return
	}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	}()

	up := newQueue()
	down := newQueue()
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); c.read(cc, up, true) }()
	go func() { defer wg.Done(); c.write(tc, up, true) }()
	go func() { defer wg.Done(); c.read(tc, down, false) }()
	go func() { defer wg.Done(); c.write(cc, down, false) }()
	wg.Wait()
}

// chunk is data in a direction's queue, due at a time.
type chunk struct {
	data []byte
	due  time.Time
	eof  bool // the sender closed its side (after data, a FIN)
}

// queue is one direction's chunks in order, with the bytes they hold.
type queue struct {
	mu     sync.Mutex
	items  []chunk
	bytes  int
	notify chan struct{} // a value when something was pushed or popped
	last   time.Time     // the due time of the latest chunk
}

func newQueue() *queue { return &queue{notify: make(chan struct{}, 1)} }

func (q *queue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// delay returns one chunk's one-way delay, and whether it is lost or
// resets the connection.
func (l *Link) delay() (d time.Duration, lost, reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d = l.cfg.RTT / 2
	if l.cfg.Jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(l.cfg.Jitter)))
	}
	if l.cfg.Reset > 0 && l.rng.Float64() < l.cfg.Reset {
		return d, false, true
	}
	if l.cfg.Loss > 0 && l.rng.Float64() < l.cfg.Loss {
		d += l.cfg.Retransmit
		lost = true
	}
	return d, lost, false
}

// read moves what src sends into q, stamping each chunk with its due time.
func (c *conn) read(src net.Conn, q *queue, up bool) {
	l := c.l
	buf := make([]byte, chunkSize)
	for {
		// Hold back while the queue is full, as a closed TCP window does.
		for {
			q.mu.Lock()
			full := q.bytes >= MaxQueued
			q.mu.Unlock()
			if !full {
				break
			}
			select {
			case <-q.notify:
			case <-c.done:
				return
			}
		}
		n, err := src.Read(buf)
		if n > 0 {
			d, lost, reset := l.delay()
			if reset {
				l.resets.Add(1)
				c.reset()
				return
			}
			if lost {
				l.lost.Add(1)
			}
			if up {
				l.chunksUp.Add(1)
			} else {
				l.chunksDown.Add(1)
			}
			q.mu.Lock()
			due := time.Now().Add(d)
			if due.Before(q.last) {
				due = q.last
			}
			q.last = due
			q.items = append(q.items, chunk{data: append([]byte(nil), buf[:n]...), due: due})
			q.bytes += n
			q.mu.Unlock()
			q.wake()
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				q.mu.Lock()
				q.items = append(q.items, chunk{eof: true, due: q.last})
				q.mu.Unlock()
				q.wake()
			} else {
				c.reset()
			}
			return
		}
	}
}

// write delivers q's chunks to dst when they are due and the link is up.
func (c *conn) write(dst net.Conn, q *queue, up bool) {
	l := c.l
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	held := false
	for {
		q.mu.Lock()
		var next chunk
		have := len(q.items) > 0
		if have {
			next = q.items[0]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.notify:
				continue
			case <-c.done:
				return
			}
		}
		// Wait while the link is partitioned; a heal delivers what waited
		// one way later.
		if st := l.State(); st != Up {
			if !held && up {
				l.heldUp.Add(1)
			}
			held = true
			select {
			case <-l.changed():
			case <-c.done:
				return
			}
			if l.State() == Up {
				heal := time.Now().Add(l.cfg.RTT / 2)
				q.mu.Lock()
				for i := range q.items {
					if q.items[i].due.Before(heal) {
						q.items[i].due = heal
					}
				}
				if q.last.Before(heal) {
					q.last = heal
				}
				q.mu.Unlock()
			}
			continue
		}
		if wait := time.Until(next.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.changed():
				timer.Stop()
			case <-c.done:
				return
			}
			continue // look again: the state may have changed
		}
		held = false
		q.mu.Lock()
		q.items = q.items[1:]
		q.bytes -= len(next.data)
		q.mu.Unlock()
		q.wake()
		if next.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
		// Counted before the write, so that whoever has read the data sees
		// it counted.
		if up {
			l.bytesUp.Add(int64(len(next.data)))
			l.deliveredUp.Add(1)
		} else {
			l.bytesDown.Add(int64(len(next.data)))
			l.deliveredDown.Add(1)
		}
		if _, err := dst.Write(next.data); err != nil {
			c.reset()
			return
		}
	}
}
