package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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

// replay runs a slow decision again, three times, on copies of its keys,
// and returns its fastest round trip: a slow-log entry that does not
// repeat was the machine's scheduling, not the command's work. ok is false
// when the entry is not a script call or Redis shortened its arguments.
func (r *redisServer) replay(e slowEntry) (fastest time.Duration, ok bool) {
	if len(e.args) < 3 {
		return 0, false
	}
	switch strings.ToUpper(e.args[0]) {
	case "EVALSHA", "EVAL", "FCALL", "EVALSHA_RO", "EVAL_RO", "FCALL_RO":
	default:
		return 0, false
	}
	for _, a := range e.args {
		if strings.HasPrefix(a, "... (") || strings.HasSuffix(a, "more bytes)") {
			return 0, false
		}
	}
	nkeys, err := strconv.Atoi(e.args[2])
	if err != nil || nkeys < 0 || 3+nkeys > len(e.args) {
		return 0, false
	}
	fastest = time.Hour
	for round := range 3 {
		args := slices.Clone(e.args)
		for i := 3; i < 3+nkeys; i++ {
			// Keep the hash tag, so that the copies stay in one slot.
			args[i] = fmt.Sprintf("%s:hostile-replay-%d", e.args[i], round)
			if _, err := respDo(r.inst.Addr, "COPY", e.args[i], args[i], "REPLACE"); err != nil {
				return 0, false
			}
		}
		start := time.Now()
		_, err := respDo(r.inst.Addr, args...)
		took := time.Since(start)
		if err != nil && !strings.Contains(err.Error(), "redis:") {
			return 0, false
		}
		fastest = min(fastest, took)
		respDo(r.inst.Addr, append([]string{"DEL"}, args[3:3+nkeys]...)...)
	}
	return fastest, true
}

// respDo sends one command on a fresh connection and returns the reply with
// its nesting kept: a string, an int64, a []any, or an error reply as error.
func respDo(addr string, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return respRead(bufio.NewReader(c))
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
