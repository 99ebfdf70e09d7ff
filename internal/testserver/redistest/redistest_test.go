package redistest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/proc"
)

// inSubtest runs f in a subtest and returns once the subtest's clean-ups
// have run, so that the caller can check what they left behind.
func inSubtest(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if !t.Run("inner", f) {
		t.FailNow()
	}
}

func TestServerStartsAndStops(t *testing.T) {
	var pid int
	var addr string
	inSubtest(t, func(t *testing.T) {
		s := Server(t)
		pid, addr = s.Pid(), s.Addr
		if got, err := s.Do("PING"); err != nil || got != "PONG" {
			t.Fatalf("PING = %q, %v, want PONG", got, err)
		}
		if got := s.MustDo("SET", "k", "v"); got != "OK" {
			t.Fatalf("SET = %q, want OK", got)
		}
		if got := s.MustDo("GET", "k"); got != "v" {
			t.Fatalf("GET = %q, want v", got)
		}
		if _, err := s.Do("GET", "missing"); !errors.Is(err, ErrNil) {
			t.Fatalf("GET missing: err = %v, want ErrNil", err)
		}
		var re *ReplyError
		if _, err := s.Do("NOSUCHCOMMAND"); !errors.As(err, &re) {
			t.Fatalf("NOSUCHCOMMAND: err = %v, want a *ReplyError", err)
		}
		if got := s.MustDo("CONFIG", "GET", "save"); got != "save\n" {
			t.Fatalf("CONFIG GET save = %q, want no persistence", got)
		}
		if got := s.MustDo("INCR", "n"); got != "1" {
			t.Fatalf("INCR = %q, want 1", got)
		}
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("Addr = %q, want 127.0.0.1:port", addr)
		}
		if !proc.Alive(pid) {
			t.Fatalf("pid %d not alive while the test runs", pid)
		}
	})
	if proc.Alive(pid) {
		t.Fatalf("redis-server pid %d still alive after the test", pid)
	}
	if _, err := (&Instance{Addr: addr}).do(200*time.Millisecond, "PING"); err == nil {
		t.Fatalf("%s still answers after the test", addr)
	}
}

func TestServerKillRestart(t *testing.T) {
	var pids []int
	inSubtest(t, func(t *testing.T) {
		s := Server(t)
		addr, first := s.Addr, s.Pid()
		pids = append(pids, first)
		s.MustDo("SET", "k", "v")
		s.Kill()
		if proc.Alive(first) {
			t.Fatalf("pid %d alive after Kill", first)
		}
		if s.Running() {
			t.Fatal("Running() = true after Kill")
		}
		if _, err := s.Do("PING"); err == nil {
			t.Fatal("PING answered after Kill")
		}
		s.Restart()
		pids = append(pids, s.Pid())
		if s.Addr != addr {
			t.Fatalf("Restart moved %s to %s", addr, s.Addr)
		}
		if s.Pid() == first {
			t.Fatalf("Restart kept pid %d", first)
		}
		if _, err := s.Do("GET", "k"); !errors.Is(err, ErrNil) {
			t.Fatalf("GET after Restart: err = %v, want ErrNil (empty data)", err)
		}
		// Restart of a running server replaces it too.
		s.MustDo("SET", "k", "v2")
		before := s.Pid()
		s.Restart()
		pids = append(pids, s.Pid())
		if proc.Alive(before) {
			t.Fatalf("pid %d alive after Restart", before)
		}
		if got := s.MustDo("PING"); got != "PONG" {
			t.Fatalf("PING = %q", got)
		}
	})
	for _, pid := range pids {
		if proc.Alive(pid) {
			t.Errorf("redis-server pid %d still alive after the test", pid)
		}
	}
}

func TestServerPauseResume(t *testing.T) {
	var pid int
	inSubtest(t, func(t *testing.T) {
		s := Server(t)
		pid = s.Pid()
		s.Pause()
		if _, err := s.do(200*time.Millisecond, "PING"); err == nil {
			t.Fatal("PING answered while paused")
		}
		s.Resume()
		if got := s.MustDo("PING"); got != "PONG" {
			t.Fatalf("PING after Resume = %q", got)
		}
		// A server left paused is still stopped at the end.
		s.Pause()
	})
	if proc.Alive(pid) {
		t.Fatalf("paused redis-server pid %d still alive after the test", pid)
	}
}

func TestServerOptions(t *testing.T) {
	t.Run("password", func(t *testing.T) {
		s := Server(t, WithPassword("s3cret"))
		if got := s.MustDo("PING"); got != "PONG" {
			t.Fatalf("PING = %q", got)
		}
		if _, err := (&Instance{Addr: s.Addr}).Do("PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("PING without password: err = %v, want NOAUTH", err)
		}
		if got, want := s.URL(), "redis://:s3cret@"+s.Addr; got != want {
			t.Fatalf("URL() = %q, want %q", got, want)
		}
	})
	t.Run("acl user", func(t *testing.T) {
		s := Server(t, WithUser("alice", "pw"))
		if got := s.MustDo("ACL", "WHOAMI"); got != "alice" {
			t.Fatalf("ACL WHOAMI = %q, want alice", got)
		}
		if _, err := (&Instance{Addr: s.Addr}).Do("PING"); err == nil {
			t.Fatal("PING as the default user answered; want it disabled")
		}
		if got, want := s.URL(), "redis://alice:pw@"+s.Addr; got != want {
			t.Fatalf("URL() = %q, want %q", got, want)
		}
	})
	t.Run("maxmemory and args", func(t *testing.T) {
		s := Server(t, WithMaxMemory("4mb", "allkeys-lru"), WithArgs("--hz", "50"))
		for _, tt := range []struct{ give, want string }{
			{"maxmemory", "maxmemory\n4194304"},
			{"maxmemory-policy", "maxmemory-policy\nallkeys-lru"},
			{"hz", "hz\n50"},
		} {
			if got := s.MustDo("CONFIG", "GET", tt.give); got != tt.want {
				t.Errorf("CONFIG GET %s = %q, want %q", tt.give, got, tt.want)
			}
		}
	})
}

func TestServersInParallel(t *testing.T) {
	// Many servers at once get distinct ports and all answer.
	seen := map[string]bool{}
	for range 4 {
		s := Server(t)
		if seen[s.Addr] {
			t.Fatalf("port %s handed out twice", s.Addr)
		}
		seen[s.Addr] = true
		if got := s.MustDo("PING"); got != "PONG" {
			t.Fatalf("PING %s = %q", s.Addr, got)
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	in := "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,hostname4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001,hostname1 myself,master - 0 0 1 connected 0-5460 7000 [7001->-abc]\n"
	got, err := parseClusterNodes(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].addr != "127.0.0.1:30004" || !got[0].has("slave") || got[0].master != "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca" {
		t.Fatalf("replica line parsed as %+v", got[0])
	}
	if m := got[1]; !m.has("master") || len(m.slots) != 2 || m.slots[0] != [2]int{0, 5460} || m.slots[1] != [2]int{7000, 7000} {
		t.Fatalf("master line parsed as %+v", m)
	}
	if _, err := parseClusterNodes("short line"); err == nil {
		t.Fatal("short line: no error")
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	var pids []int
	inSubtest(t, func(t *testing.T) {
		t0 := time.Now()
		c := Cluster(t, 3, 1)
		t.Logf("cluster ready after %v", time.Since(t0))
		for _, n := range c.Nodes() {
			pids = append(pids, n.Pid())
		}
		if got := len(c.Addrs()); got != 6 {
			t.Fatalf("len(Addrs()) = %d, want 6", got)
		}
		ms, rs := c.Masters(), c.Replicas()
		if len(ms) != 3 || len(rs) != 3 {
			t.Fatalf("%d masters, %d replicas, want 3 and 3", len(ms), len(rs))
		}
		for k, m := range ms {
			if m != c.Node(k) {
				t.Fatalf("Masters()[%d] = %s, want node %d %s", k, m.Addr, k, c.Node(k).Addr)
			}
		}
		// Key "a" is in slot 15495, the third range; the first master
		// redirects.
		if _, err := ms[0].Do("SET", "a", "1"); err == nil || !strings.HasPrefix(err.Error(), "redis: MOVED 15495 ") {
			t.Fatalf("SET a on master 0: err = %v, want MOVED 15495", err)
		}
		// WAIT counts the replicas that acknowledged this connection's
		// writes: the SET goes on the same connection (on a fresh one,
		// WAIT would return at once, and the master could die before
		// its replica had a).
		conn, err := dial(ms[2].Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.do("SET", "a", "1"); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			n, err := conn.do("WAIT", "1", "2000")
			if err != nil {
				t.Fatal(err)
			}
			if n == "1" {
				break
			}
			if i == 5 {
				t.Fatal("the replica never acknowledged a")
			}
		}
		conn.close()

		killed := c.KillMaster(2)
		if killed != ms[2] || killed.Running() {
			t.Fatalf("KillMaster(2) killed %s (running %v), want %s", killed.Addr, killed.Running(), ms[2].Addr)
		}
		start := time.Now()
		c.WaitPromoted()
		t.Logf("promoted after %v", time.Since(start))
		after := c.Masters()
		if len(after) != 3 {
			t.Fatalf("%d masters after failover, want 3", len(after))
		}
		if after[2] == killed || !after[2].Running() {
			t.Fatalf("slot range 2 still served by the killed %s", killed.Addr)
		}
		if got := after[2].MustDo("GET", "a"); got != "1" {
			t.Fatalf("GET a on the promoted replica = %q, want 1", got)
		}
		// The killed node rejoins as a replica when restarted.
		start = time.Now()
		killed.Restart()
		pids = append(pids, killed.Pid())
		c.WaitHealthy()
		t.Logf("rejoined after %v", time.Since(start))
	})
	for _, pid := range pids {
		if proc.Alive(pid) {
			t.Errorf("cluster node pid %d still alive after the test", pid)
		}
	}
}

func TestClusterSingleMaster(t *testing.T) {
	t.Parallel()
	c := Cluster(t, 1, 0)
	if got := c.Node(0).MustDo("SET", "x", "1"); got != "OK" {
		t.Fatalf("SET = %q", got)
	}
	if got := len(c.Masters()); got != 1 {
		t.Fatalf("%d masters, want 1", got)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	var pids []int
	inSubtest(t, func(t *testing.T) {
		si := Sentinel(t, 1)
		for _, n := range append(si.Nodes, si.Sentinel) {
			pids = append(pids, n.Pid())
		}
		m := si.Master()
		if m != si.Nodes[0] {
			t.Fatalf("Master() = %s, want node 0 %s", m.Addr, si.Nodes[0].Addr)
		}
		m.MustDo("SET", "k", "v")
		// WAIT answers 0 while the replica's first sync is still running:
		// kill the master only once the replica holds the key, or the
		// promoted replica rightly lacks it.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if v, err := si.Nodes[1].Do("GET", "k"); err == nil && v == "v" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the replica never received k")
			}
			m.MustDo("WAIT", "1", "200")
		}
		start := time.Now()
		killed := si.KillMaster()
		nm := si.WaitFailover()
		t.Logf("failover after %v", time.Since(start))
		if nm == killed || nm != si.Nodes[1] {
			t.Fatalf("new master %s, want the replica %s", nm.Addr, si.Nodes[1].Addr)
		}
		if got := nm.MustDo("GET", "k"); got != "v" {
			t.Fatalf("GET k on the new master = %q, want v", got)
		}
	})
	for _, pid := range pids {
		if proc.Alive(pid) {
			t.Errorf("pid %d still alive after the test", pid)
		}
	}
}
