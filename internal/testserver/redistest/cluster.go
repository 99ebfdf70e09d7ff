package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ClusterTimeout bounds cluster creation and each wait for a healthy
// cluster (after a failover, for example): it only ends a cluster that
// never forms or heals, so it is far beyond what a starved machine takes
// (the nodes' gossip took more than 30 s at load 50).
const ClusterTimeout = 2 * time.Minute

// NodeTimeout is the cluster-node-timeout of every node: a master that
// stops answering for this long is failed over to one of its replicas.
const NodeTimeout = time.Second

// ClusterInstance is a local Redis Cluster: every node a redis-server on
// 127.0.0.1 with its own port and bus port.
type ClusterInstance struct {
	t     testing.TB
	nodes []*Instance
}

// Cluster starts masters*(1+replicasPerMaster) cluster nodes, spreads the
// 16384 slots evenly over the masters (master i owns the i-th range),
// attaches replicasPerMaster replicas to each master, and waits until
// every node reports cluster_state:ok with all slots covered and every
// replica is in sync. Failover is fast: cluster-node-timeout is 1 s and
// replicas are always eligible (cluster-replica-validity-factor 0).
//
// The cluster is built with CLUSTER ADDSLOTSRANGE / MEET / REPLICATE, the
// same steps as redis-cli --cluster create, which also allows fewer than
// 3 masters.
func Cluster(t testing.TB, masters, replicasPerMaster int) *ClusterInstance {
	t.Helper()
	if masters < 1 || replicasPerMaster < 0 || masters*(1+replicasPerMaster) > 32 {
		t.Fatalf("redistest: Cluster(masters=%d, replicasPerMaster=%d): need 1 <= masters, 0 <= replicas, at most 32 nodes", masters, replicasPerMaster)
	}
	c := &ClusterInstance{t: t}
	c.startNodes(masters * (1 + replicasPerMaster))
	ids := c.assignSlots(masters)
	c.meet()
	for r := range replicasPerMaster {
		for k := range masters {
			c.nodes[masters+r*masters+k].MustDo("CLUSTER", "REPLICATE", ids[k])
		}
	}
	c.waitReady(masters)
	return c
}

// startNodes starts n cluster-enabled nodes, each on a free port and bus
// port, stopped all at once when the test ends.
func (c *ClusterInstance) startNodes(n int) {
	t := c.t
	for range n {
		i := newInstance(t, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
			"--cluster-replica-validity-factor", "0",
			"--cluster-allow-replica-migration", "no",
			"--cluster-require-full-coverage", "yes",
			"--shutdown-timeout", "0",
			"--repl-diskless-sync-delay", "0",
		}, options{})
		err := i.startFreeWith(func() ([]string, error) {
			bus, err := freePort()
			return []string{"--cluster-port", strconv.Itoa(bus)}, err
		})
		if err != nil {
			t.Fatalf("redistest: cluster node: %v", err)
		}
		c.nodes = append(c.nodes, i)
	}
	// Stop all nodes at once when the test ends (registered after the
	// nodes' own clean-ups, so it runs first).
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, i := range c.nodes {
			wg.Go(i.stop)
		}
		wg.Wait()
	})
}

// assignSlots splits the slots evenly across the first masters nodes, each
// with its own config epoch, and returns every node's ID.
func (c *ClusterInstance) assignSlots(masters int) []string {
	ids := make([]string, len(c.nodes))
	for k, i := range c.nodes {
		ids[k] = i.MustDo("CLUSTER", "MYID")
	}
	for k := range masters {
		lo, hi := k*16384/masters, (k+1)*16384/masters-1
		m := c.nodes[k]
		m.MustDo("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
		m.MustDo("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(k+1))
	}
	return ids
}

// meet introduces every node to the first and waits until all know each
// other, with no handshake left. A handshake that does not complete within
// the node timeout (a busy machine) is dropped by Redis: a node that still
// does not know the first one after a while is introduced again.
func (c *ClusterInstance) meet() {
	n := len(c.nodes)
	first := c.nodes[0]
	introduce := func(i *Instance) {
		i.MustDo("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.Port), first.busPort())
	}
	for _, i := range c.nodes[1:] {
		introduce(i)
	}
	lastMeet := time.Now()
	c.waitFor("all nodes to know each other", func() error {
		var missing []*Instance
		var err error
		for _, i := range c.nodes {
			view, verr := i.clusterNodes()
			if verr != nil {
				return verr
			}
			if len(view) != n && err == nil {
				err = fmt.Errorf("%s knows %d of %d nodes", i.Addr, len(view), n)
			}
			for _, v := range view {
				if (v.has("handshake") || v.has("noaddr")) && err == nil {
					err = fmt.Errorf("%s sees %s as %v", i.Addr, v.addr, v.flags)
				}
			}
			if i != first && !slices.ContainsFunc(view, func(v nodeInfo) bool { return v.addr == first.Addr }) {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 && time.Since(lastMeet) > 2*NodeTimeout {
			for _, i := range missing {
				introduce(i)
			}
			lastMeet = time.Now()
		}
		return err
	})
}

// waitReady waits until the cluster is healthy and every replica (the
// nodes after the first masters) is in sync.
func (c *ClusterInstance) waitReady(masters int) {
	c.waitFor("the cluster to be ready", func() error {
		if err := c.healthy(); err != nil {
			return err
		}
		for _, i := range c.nodes[masters:] {
			info, err := i.Do("INFO", "replication")
			if err != nil {
				return err
			}
			if infoField(info, "master_link_status") != "up" {
				return fmt.Errorf("replica %s: master_link_status %q", i.Addr, infoField(info, "master_link_status"))
			}
		}
		return nil
	})
}

func (i *Instance) busPort() string {
	for k := 0; k+1 < len(i.args); k++ {
		if i.args[k] == "--cluster-port" {
			return i.args[k+1]
		}
	}
	return strconv.Itoa(i.Port + 10000)
}

// Addrs lists every node's address, masters first as started.
func (c *ClusterInstance) Addrs() []string {
	out := make([]string, len(c.nodes))
	for k, i := range c.nodes {
		out[k] = i.Addr
	}
	return out
}

// Nodes lists every node, in start order.
func (c *ClusterInstance) Nodes() []*Instance { return slices.Clone(c.nodes) }

// Node returns the k-th node in start order: masters first (node k < masters
// is the master of the k-th slot range at creation), then the replicas.
func (c *ClusterInstance) Node(k int) *Instance { return c.nodes[k] }

// Masters returns the current masters, as a running node sees them,
// ordered by the lowest slot each owns: Masters()[k] serves the k-th slot
// range, also after a failover.
func (c *ClusterInstance) Masters() []*Instance {
	c.t.Helper()
	view := c.view()
	var ms []nodeInfo
	for _, v := range view {
		if v.has("master") && !v.failed() && len(v.slots) > 0 {
			ms = append(ms, v)
		}
	}
	slices.SortFunc(ms, func(a, b nodeInfo) int { return a.slots[0][0] - b.slots[0][0] })
	out := make([]*Instance, 0, len(ms))
	for _, v := range ms {
		out = append(out, c.byAddr(v.addr))
	}
	return out
}

// Replicas returns the current replicas that are not failed, in start
// order.
func (c *ClusterInstance) Replicas() []*Instance {
	c.t.Helper()
	replica := map[string]bool{}
	for _, v := range c.view() {
		if v.has("slave") && !v.failed() {
			replica[v.addr] = true
		}
	}
	var out []*Instance
	for _, i := range c.nodes {
		if replica[i.Addr] && i.Running() {
			out = append(out, i)
		}
	}
	return out
}

// KillMaster kills (SIGKILL) the master of the k-th slot range, as
// Masters orders them, and returns it. Call WaitPromoted to wait for one of
// its replicas to take over.
func (c *ClusterInstance) KillMaster(k int) *Instance {
	c.t.Helper()
	ms := c.Masters()
	if k < 0 || k >= len(ms) {
		c.t.Fatalf("redistest: KillMaster(%d): the cluster has %d masters", k, len(ms))
	}
	ms[k].Kill()
	return ms[k]
}

// WaitPromoted waits until every slot is served again by a running master
// (a replica of a killed master has been promoted), every running node
// reports cluster_state:ok and all agree on every running node's role, and
// fails the test after ClusterTimeout.
func (c *ClusterInstance) WaitPromoted() {
	c.t.Helper()
	c.waitFor("a replica to be promoted", c.healthy)
}

// WaitHealthy waits until every running node reports cluster_state:ok,
// sees all 16384 slots served by running masters and agrees with the
// others on every running node's role.
func (c *ClusterInstance) WaitHealthy() {
	c.t.Helper()
	c.waitFor("a healthy cluster", c.healthy)
}

func (c *ClusterInstance) healthy() error {
	running := map[string]bool{}
	for _, i := range c.nodes {
		if i.Running() {
			running[i.Addr] = true
		}
	}
	for _, i := range c.nodes {
		if !running[i.Addr] {
			continue
		}
		info, err := i.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if s := infoField(info, "cluster_state"); s != "ok" {
			return fmt.Errorf("%s: cluster_state %q", i.Addr, s)
		}
		if s := infoField(info, "cluster_slots_ok"); s != "16384" {
			return fmt.Errorf("%s: cluster_slots_ok %s", i.Addr, s)
		}
		view, err := i.clusterNodes()
		if err != nil {
			return err
		}
		covered := 0
		for _, v := range view {
			if !v.has("master") || len(v.slots) == 0 {
				continue
			}
			if v.failed() || !running[v.addr] {
				return fmt.Errorf("%s: slots %v still on %s (%v)", i.Addr, v.slots, v.addr, v.flags)
			}
			for _, r := range v.slots {
				covered += r[1] - r[0] + 1
			}
		}
		if covered != 16384 {
			return fmt.Errorf("%s: masters cover %d of 16384 slots", i.Addr, covered)
		}
		// Every running node agrees on the roles: the others learn a
		// replica's role, or a failed master's return, by gossip, a
		// while after the node itself knows it.
		known := 0
		for _, v := range view {
			if !running[v.addr] {
				continue
			}
			known++
			switch {
			case v.failed() || v.has("handshake") || v.has("noaddr"):
				return fmt.Errorf("%s sees %s as %v", i.Addr, v.addr, v.flags)
			case v.has("master") && len(v.slots) == 0:
				return fmt.Errorf("%s sees %s as a master without slots (its role not yet known)", i.Addr, v.addr)
			case !v.has("master") && !v.has("slave"):
				return fmt.Errorf("%s sees %s as %v", i.Addr, v.addr, v.flags)
			}
		}
		if known != len(running) {
			return fmt.Errorf("%s knows %d of the %d running nodes", i.Addr, known, len(running))
		}
	}
	return nil
}

func (c *ClusterInstance) waitFor(what string, cond func() error) {
	c.t.Helper()
	deadline := time.Now().Add(ClusterTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: waited %v for %s: %v", ClusterTimeout, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// view is the cluster as the first running node that answers sees it.
func (c *ClusterInstance) view() []nodeInfo {
	c.t.Helper()
	var last error
	for _, i := range c.nodes {
		if !i.Running() {
			continue
		}
		v, err := i.clusterNodes()
		if err == nil {
			return v
		}
		last = err
	}
	c.t.Fatalf("redistest: no cluster node answers CLUSTER NODES: %v", last)
	return nil
}

func (c *ClusterInstance) byAddr(addr string) *Instance {
	for _, i := range c.nodes {
		if i.Addr == addr {
			return i
		}
	}
	c.t.Fatalf("redistest: cluster node %s is not one of ours", addr)
	return nil
}

// nodeInfo is one line of CLUSTER NODES.
type nodeInfo struct {
	id, addr string
	flags    []string
	master   string   // the master's id for a replica, else "-"
	slots    [][2]int // ranges owned, in order
}

func (v nodeInfo) has(flag string) bool { return slices.Contains(v.flags, flag) }

func (v nodeInfo) failed() bool { return v.has("fail") || v.has("fail?") }

func (i *Instance) clusterNodes() ([]nodeInfo, error) {
	s, err := i.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	view, err := parseClusterNodes(s)
	for k := range view {
		// A node that has met no other node does not know its own IP.
		if strings.HasPrefix(view[k].addr, ":") && view[k].has("myself") {
			view[k].addr = i.Addr
		}
	}
	return view, err
}

// parseClusterNodes parses a CLUSTER NODES reply:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
func parseClusterNodes(s string) ([]nodeInfo, error) {
	var out []nodeInfo
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("redistest: bad CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		v := nodeInfo{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("redistest: bad slot %q in %q", sl, line)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("redistest: bad slot %q in %q", sl, line)
				}
			}
			v.slots = append(v.slots, [2]int{a, b})
		}
		out = append(out, v)
	}
	return out, nil
}
