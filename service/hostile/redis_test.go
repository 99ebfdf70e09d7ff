package hostile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// redisServer is the redis-server of one class run, with its slow log set
// to record every command of slowlogBound µs or more.
type redisServer struct {
	inst       *redistest.Instance
	usedBefore int64
	killed     atomic.Bool // by the RSS watchdog
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	r := &redisServer{inst: redistest.Server(t)}
	r.inst.MustDo("CONFIG", "SET", "slowlog-log-slower-than", strconv.Itoa(slowlogBound))
	r.inst.MustDo("CONFIG", "SET", "slowlog-max-len", "1024")
	return r
}

// resetSlowlog empties the slow log and notes used_memory: what the class
// does is measured from here.
func (r *redisServer) resetSlowlog(t *testing.T) {
	t.Helper()
	r.inst.MustDo("SLOWLOG", "RESET")
	r.usedBefore = r.usedMemory(t)
}

// usedMemory is INFO memory's used_memory.
func (r *redisServer) usedMemory(t *testing.T) int64 {
	t.Helper()
	info, err := r.inst.Do("INFO", "memory")
	if err != nil {
		t.Errorf("redis INFO memory: %v", err)
		return 0
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// slowEntry is one SLOWLOG GET entry.
type slowEntry struct {
	micros int64
	args   []string
}

// slowlog returns every entry of the slow log.
func (r *redisServer) slowlog() ([]slowEntry, error) {
	reply, err := respDo(r.inst.Addr, "SLOWLOG", "GET", "1024")
	if err != nil {
		return nil, err
	}
	list, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("SLOWLOG GET: %v", reply)
	}
	var out []slowEntry
	for _, e := range list {
		fields, ok := e.([]any)
		if !ok || len(fields) < 4 {
			return nil, fmt.Errorf("SLOWLOG GET entry %v", e)
		}
		us, _ := fields[2].(int64)
		var args []string
		if a, ok := fields[3].([]any); ok {
			for _, x := range a {
				args = append(args, fmt.Sprint(x))
			}
		}
		out = append(out, slowEntry{micros: us, args: args})
	}
	return out, nil
}

// String shows the entry's command, shortened.
func (e slowEntry) String() string {
	var b strings.Builder
	for i, a := range e.args {
		if i == 8 {
			fmt.Fprintf(&b, " … (%d arguments)", len(e.args))
			break
		}
		if len(a) > 48 {
			a = a[:48] + "…"
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return fmt.Sprintf("%d µs: %s", e.micros, b.String())
}

// keys returns the keys of e's command (COMMAND GETKEYS), nil when it has
// none or Redis shortened its arguments.
func (r *redisServer) keys(c *respConn, e slowEntry) []string {
	for _, a := range e.args {
		if strings.HasPrefix(a, "... (") || strings.HasSuffix(a, "more bytes)") {
			return nil
		}
	}
	reply, err := c.do(append([]string{"COMMAND", "GETKEYS"}, e.args...)...)
	if err != nil {
		return nil
	}
	list, _ := reply.([]any)
	var keys []string
	for _, k := range list {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	return keys
}

// isScript reports whether e is a script call.
func (e slowEntry) isScript() bool {
	if len(e.args) == 0 {
		return false
	}
	switch strings.ToUpper(e.args[0]) {
	case "EVALSHA", "EVAL", "FCALL", "EVALSHA_RO", "EVAL_RO", "FCALL_RO":
		return true
	}
	return false
}

// isDecision reports whether e is part of a decision of sluice's: a
// script call, or a command on sluice's keys (a script's own commands are
// logged too). Commands of the suite (INFO, COPY) or of sluice's start-up
// are not.
func (r *redisServer) isDecision(c *respConn, e slowEntry) bool {
	if e.isScript() {
		return true
	}
	for _, k := range r.keys(c, e) {
		if strings.HasPrefix(k, "sluice:") {
			return true
		}
	}
	return false
}

// replay runs a slow command again, replayRuns times on copies of its
// keys and replayRuns times on keys that do not exist (the state before a
// first decision), and returns the larger of the two fastest runs, as
// Redis itself times them (INFO commandstats: no round trip): a slow-log
// entry that repeats in neither was the machine's scheduling, not the
// command's work. ok is false when Redis shortened the entry's arguments
// or the command has no keys.
func (r *redisServer) replay(c *respConn, e slowEntry) (took time.Duration, ok bool) {
	keys := r.keys(c, e)
	if len(keys) == 0 {
		return 0, false
	}
	for _, copyState := range []bool{true, false} {
		fastest := time.Hour
		for round := range replayRuns {
			args := slices.Clone(e.args)
			var replayKeys []string
			for _, k := range keys {
				// Keep the hash tag, so that the copies stay in one slot.
				rk := fmt.Sprintf("%s:hostile-replay-%t-%d", k, copyState, round)
				if copyState {
					if _, err := c.do("COPY", k, rk, "REPLACE"); err != nil {
						return 0, false
					}
				}
				replayKeys = append(replayKeys, rk)
				for i := 1; i < len(args); i++ {
					if e.args[i] == k {
						args[i] = rk
					}
				}
			}
			d, err := r.inst.CommandTime(args...)
			c.do(append([]string{"DEL"}, replayKeys...)...)
			var re *redistest.ReplyError
			if err != nil && !errors.As(err, &re) {
				return 0, false
			}
			fastest = min(fastest, d)
		}
		took = max(took, fastest)
	}
	return took, true
}

// replayRuns is how often replay runs a command on each kind of keys.
const replayRuns = 5

// respConn is a connection to Redis that keeps the nesting of replies.
type respConn struct {
	nc net.Conn
	r  *bufio.Reader
}

func respDial(addr string) (*respConn, error) {
	nc, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	return &respConn{nc: nc, r: bufio.NewReader(nc)}, nil
}

func (c *respConn) Close() error { return c.nc.Close() }

// do sends one command and returns its reply: a string, an int64, a []any,
// or an error reply as an error starting with "redis:".
func (c *respConn) do(args ...string) (any, error) {
	c.nc.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.nc.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return respRead(c.r)
}

// respDo sends one command on a fresh connection.
func respDo(addr string, args ...string) (any, error) {
	c, err := respDial(addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.do(args...)
}

func respRead(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty RESP line")
	}
	rest := line[1:]
	switch line[0] {
	case '+':
		return rest, nil
	case '-':
		return nil, fmt.Errorf("redis: %s", rest)
	case ':':
		return strconv.ParseInt(rest, 10, 64)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, 0, n)
		for range n {
			v, err := respRead(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown RESP type %q", line)
}
