package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// MasterName is the name under which Sentinel monitors the master.
const MasterName = "mymaster"

// SentinelInstance is a master with replicas, watched by one Sentinel
// (quorum 1, down-after 1 s) that fails over when the master dies.
type SentinelInstance struct {
	t testing.TB
	// Sentinel is the sentinel process; its Addr is what clients dial.
	Sentinel *Instance
	// Nodes are the data nodes: Nodes[0] is the master at start.
	Nodes []*Instance
}

// Sentinel starts a master, replicas replicas of it, and one Sentinel
// monitoring them as MasterName, and waits until the Sentinel knows every
// replica.
func Sentinel(t testing.TB, replicas int) *SentinelInstance {
	t.Helper()
	if replicas < 0 || replicas > 8 {
		t.Fatalf("redistest: Sentinel(replicas=%d): want 0 to 8", replicas)
	}
	si := &SentinelInstance{t: t}
	master := Server(t, WithArgs("--repl-diskless-sync-delay", "0", "--shutdown-timeout", "0"))
	si.Nodes = append(si.Nodes, master)
	for range replicas {
		r := Server(t, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port),
			"--repl-diskless-sync-delay", "0", "--shutdown-timeout", "0"))
		si.Nodes = append(si.Nodes, r)
	}

	s := newInstance(t, []string{"--sentinel"}, options{})
	conf := filepath.Join(s.Dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", MasterName, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("redistest: write %s: %v", conf, err)
	}
	s.conf = conf
	// Sentinel refuses the persistence directives of a data node.
	s.args = stripArgs(s.args, "--save", "--appendonly")
	if err := s.startFree(); err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	si.Sentinel = s
	si.wait("the sentinel to see every replica", func() error {
		addr, err := si.masterAddr()
		if err != nil {
			return err
		}
		if addr != master.Addr {
			return fmt.Errorf("sentinel reports master %s, want %s", addr, master.Addr)
		}
		return si.replicasUp(master, replicas)
	})
	return si
}

// stripArgs removes each named flag and its one value from args.
func stripArgs(args []string, flags ...string) []string {
	var out []string
	for k := 0; k < len(args); k++ {
		if k+1 < len(args) && slices.Contains(flags, args[k]) {
			k++
			continue
		}
		out = append(out, args[k])
	}
	return out
}

// Addr is the Sentinel's address, for clients that take sentinel
// addresses and a master name (MasterName).
func (si *SentinelInstance) Addr() string { return si.Sentinel.Addr }

// Master returns the data node the Sentinel currently reports as master.
func (si *SentinelInstance) Master() *Instance {
	si.t.Helper()
	addr, err := si.masterAddr()
	if err != nil {
		si.t.Fatalf("redistest: sentinel master: %v", err)
	}
	for _, n := range si.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	si.t.Fatalf("redistest: sentinel reports master %s, not one of ours", addr)
	return nil
}

// KillMaster kills the current master and returns it; WaitFailover waits
// for the Sentinel to promote a replica.
func (si *SentinelInstance) KillMaster() *Instance {
	si.t.Helper()
	m := si.Master()
	m.Kill()
	return m
}

// WaitFailover waits until the Sentinel reports a running master that
// answers as a master, and returns it.
func (si *SentinelInstance) WaitFailover() *Instance {
	si.t.Helper()
	var m *Instance
	si.wait("a sentinel failover", func() error {
		addr, err := si.masterAddr()
		if err != nil {
			return err
		}
		for _, n := range si.Nodes {
			if n.Addr != addr {
				continue
			}
			if !n.Running() {
				return fmt.Errorf("sentinel still reports the dead master %s", addr)
			}
			info, err := n.Do("INFO", "replication")
			if err != nil {
				return err
			}
			if role := infoField(info, "role"); role != "master" {
				return fmt.Errorf("%s: role %s", addr, role)
			}
			m = n
			return nil
		}
		return fmt.Errorf("sentinel reports master %s, not one of ours", addr)
	})
	return m
}

func (si *SentinelInstance) masterAddr() (string, error) {
	s, err := si.Sentinel.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
	if err != nil {
		return "", err
	}
	host, port, ok := strings.Cut(s, "\n")
	if !ok {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME = %q", s)
	}
	return net.JoinHostPort(host, port), nil
}

func (si *SentinelInstance) replicasUp(master *Instance, want int) error {
	info, err := master.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if got := infoField(info, "connected_slaves"); got != strconv.Itoa(want) {
		return fmt.Errorf("master has %s connected replicas, want %d", got, want)
	}
	s, err := si.Sentinel.Do("SENTINEL", "REPLICAS", MasterName)
	if err != nil {
		return err
	}
	if got := strings.Count(s, "\nname\n") + boolInt(strings.HasPrefix(s, "name\n")); got != want {
		return fmt.Errorf("sentinel knows %d replicas, want %d", got, want)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (si *SentinelInstance) wait(what string, cond func() error) {
	si.t.Helper()
	c := &ClusterInstance{t: si.t}
	c.waitFor(what, cond)
}
