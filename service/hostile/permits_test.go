package hostile

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// permitsClass: one key's permits, as many as --max-permits allows, each
// held by its own holder of the longest id, one under a long lease (which
// keeps the key: it lives as long as its latest lease) and the others under
// one short lease, so that they end together; then an acquire on the key,
// which finds all but one of them expired. It is acquired (the expired hold
// nothing), and on Redis its script costs at most pileBound (half the 1 ms
// a script may take) more than the same script on a key that holds no
// expired permit: a permit script that removed every expired holder at
// once took 1.3 to 3.3 ms of Redis time for 10,000.
//
// The slow log's replay of the class' check cannot measure that acquire:
// it replays a command on copies of its keys after the class, when the
// acquire has changed them. So the class copies the key before the acquire
// and runs the acquire's script again on each copy (which finds every
// holder there expired) and on as many fresh keys, taking each one's time
// from the slow log (Redis's own time, which a busy machine stretches but
// never shortens): the fastest run on a copy against the fastest on a
// fresh key, a calibration made at the same moment on the same machine.
var permitsClass = class{name: "permits", run: runPermits}

const (
	maxHolderLen    = 128             // sluice.MaxHolderLen: the longest holder ids cost Redis the most to remove
	permitLease     = 8 * time.Second // long enough to acquire them all on a busy machine
	permitKeepLease = 5 * time.Minute // outlasts the acquiring however busy the machine
	permitClients   = 16
	permitReplays   = 5
	pileBound       = 500 * time.Microsecond
)

// permitReply is what the class reads of a /v1/acquire answer.
type permitReply struct {
	Acquired bool `json:"acquired"`
	Held     int  `json:"held"`
}

func runPermits(t *testing.T, h *harness) {
	maxPermits, err := strconv.Atoi(bound(t, "max-permits", "10000"))
	if err != nil || maxPermits <= 0 {
		t.Fatalf("--max-permits default: %v", err)
	}
	// One kept connection per client, each idle for less than the server's
	// --http-idle-timeout: no request meets a connection the server is
	// closing, and the clients never open more than --max-connections.
	// Each client has an address of its own (127.0.0.10 and up), so that
	// --max-permits-per-client does not stop the pile short of
	// --max-permits.
	clients := make([]*http.Client, permitClients)
	for i := range clients {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}, Timeout: dialTimeout}
		clients[i] = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Second}}
		defer clients[i].CloseIdleConnections()
	}
	cl := clients[0]
	acquire := func(cl *http.Client, holder string, lease time.Duration) (permitReply, error) {
		body := fmt.Sprintf(`{"key":"hostile-permits","max":%d,"lease_ms":%d,"holder":%q}`, maxPermits, lease.Milliseconds(), holder)
		code, b, err := statusOf(cl.Post(h.p.httpURL("/v1/acquire"), "application/json", strings.NewReader(body)))
		var r permitReply
		switch {
		case err != nil:
			return r, err
		case code != 200 && code != 429:
			return r, fmt.Errorf("%d %s", code, trim(b))
		}
		return r, json.Unmarshal([]byte(b), &r)
	}

	if r, err := acquire(cl, "keeper", permitKeepLease); err != nil || !r.Acquired {
		t.Fatalf("POST /v1/acquire of the first holder = %+v, %v; want acquired", r, err)
	}
	// Every other holder, by permitClients clients at once; the answers
	// tell how many are held when the acquiring ends.
	var next, held atomic.Int64
	next.Store(1)
	var errs, refused atomic.Int32
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(maxPermits) && errs.Load() < 3; i = next.Add(1) {
				r, err := acquire(cl, fmt.Sprintf("holder-%0*d", maxHolderLen-len("holder-"), i), permitLease)
				if err != nil {
					if errs.Add(1) <= 3 {
						t.Errorf("POST /v1/acquire, holder %d: %v", i, err)
					}
					continue
				}
				if !r.Acquired {
					refused.Add(1)
				}
				for {
					old := held.Load()
					if int64(r.Held) <= old || held.CompareAndSwap(old, int64(r.Held)) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	last := time.Now()
	t.Logf("%d holders acquired, %d under a lease of %v; at most %d held at once", maxPermits, maxPermits-1, permitLease, held.Load())
	if n := refused.Load(); n > 0 {
		// The pile is what the class measures: a refusal (a bound on
		// what one client holds, say) makes it smaller than the key allows.
		t.Errorf("%d of %d acquires of the pile refused (429): the pile is smaller than --max-permits %d allows", n, maxPermits-1, maxPermits)
	}
	// The acquiring sets the class up: thousands of ordinary acquires, of
	// which a busy machine stretches some past 1 ms of wall time, more
	// than the slow log's check replays. What the class measures follows.
	if h.redis != nil {
		h.redis.resetSlowlog(t)
	}

	// Every short lease has ended; a new holder finds them expired.
	time.Sleep(time.Until(last.Add(permitLease + 100*time.Millisecond)))
	var pile *permitPile
	if h.redis != nil {
		pile = copyPile(t, h.redis)
	}
	r, err := acquire(cl, "after", permitLease)
	if err != nil || !r.Acquired || r.Held != 2 {
		t.Errorf("POST /v1/acquire after the short leases ended = %+v, %v; want acquired, held 2 (the first holder's and its own: the expired hold nothing)", r, err)
	}
	if pile != nil {
		pile.measure(t)
	}
}

// permitPile is the permit key's copies, made before the acquire that
// finds its holders expired, and the slow log set to log every command.
type permitPile struct {
	r      *redisServer
	c      *respConn
	key    string
	copies []string
}

// copyPile finds the class' permit key, copies it permitReplays times and
// sets the slow log to log every command, so that the acquire's script
// can be found and run again.
func copyPile(t *testing.T, r *redisServer) *permitPile {
	t.Helper()
	c, err := respDial(r.inst.Addr)
	if err != nil {
		t.Fatalf("redis: %v", err)
	}
	reply, err := c.do("SCAN", "0", "MATCH", "*hostile-permits*", "COUNT", "100000")
	list, _ := reply.([]any)
	var keys []any
	if len(list) == 2 {
		keys, _ = list[1].([]any)
	}
	if err != nil || len(keys) != 1 {
		c.Close()
		t.Fatalf("redis: the class' permit key: %v, %v; want one key", reply, err)
	}
	p := &permitPile{r: r, c: c, key: keys[0].(string)}
	for i := range permitReplays {
		cp := fmt.Sprintf("%s:hostile-pile-%d", p.key, i) // the hash tag kept: one slot
		if _, err := c.do("COPY", p.key, cp, "REPLACE"); err != nil {
			t.Fatalf("redis: COPY %s: %v", p.key, err)
		}
		p.copies = append(p.copies, cp)
	}
	for _, cmd := range [][]string{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"SLOWLOG", "RESET"}} {
		if _, err := c.do(cmd...); err != nil {
			t.Fatalf("redis: %v: %v", cmd, err)
		}
	}
	return p
}

// measure finds the acquire's script in the slow log, runs it on each copy
// and on as many fresh keys, and holds the fastest on a copy to the fastest
// on a fresh key plus pileBound. It leaves the slow log as the class' check
// wants it.
func (p *permitPile) measure(t *testing.T) {
	t.Helper()
	defer func() {
		// The copies go first, freed in the background (UNLINK): a
		// DEL of 10,000 members blocks Redis for milliseconds.
		p.c.do(append([]string{"UNLINK"}, p.copies...)...)
		for _, cmd := range [][]string{{"CONFIG", "SET", "slowlog-log-slower-than", strconv.Itoa(slowlogBound)}, {"SLOWLOG", "RESET"}} {
			if _, err := p.c.do(cmd...); err != nil {
				t.Errorf("redis: %v: %v", cmd, err)
			}
		}
		p.c.Close()
	}()
	entries, err := p.r.slowlog()
	if err != nil {
		t.Fatalf("SLOWLOG GET: %v", err)
	}
	var acquire *slowEntry
	for i := range entries {
		if e := &entries[i]; e.isScript() && slices.Contains(e.args, p.key) {
			acquire = e
			break
		}
	}
	if acquire == nil {
		t.Fatalf("the slow log holds no script call on %s (%d entries)", p.key, len(entries))
	}
	// run runs the acquire's script on key and returns its time as the
	// slow log has it.
	run := func(key string) time.Duration {
		args := slices.Clone(acquire.args)
		for i := range args {
			if args[i] == p.key {
				args[i] = key
			}
		}
		if _, err := p.c.do("SLOWLOG", "RESET"); err != nil {
			t.Fatalf("SLOWLOG RESET: %v", err)
		}
		if _, err := p.c.do(args...); err != nil {
			t.Fatalf("%v: %v", acquire, err)
		}
		es, err := p.r.slowlog()
		if err != nil {
			t.Fatalf("SLOWLOG GET: %v", err)
		}
		for _, e := range es { // the probes' calls are logged too
			if e.isScript() && slices.Contains(e.args, key) {
				return time.Duration(e.micros) * time.Microsecond
			}
		}
		t.Fatalf("the slow log lost the script call on %s", key)
		return 0
	}
	var onPile, fresh []time.Duration
	for i, cp := range p.copies {
		onPile = append(onPile, run(cp))
		freshKey := fmt.Sprintf("%s:hostile-fresh-%d", p.key, i)
		p.copies = append(p.copies, freshKey) // deleted with the copies
		fresh = append(fresh, run(freshKey))
	}
	best, calib := slices.Min(onPile), slices.Min(fresh)
	t.Logf("the acquire on %s took %d µs; run again on copies of the key: %v, on fresh keys: %v", p.key, acquire.micros, onPile, fresh)
	if best > calib+pileBound {
		t.Errorf("an acquire on a key whose holders expired together took %v (the fastest of %d runs on copies of the key), more than %v beyond the same script on a fresh key (%v): its work grows with the expired holders", best, len(onPile), pileBound, calib)
	}
}
