package memcachestore

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// lookupSRV resolves an SRV name, _service._proto.name, into its targets
// as target:port, sorted as text: the order envoyproxy/ratelimit gives
// gomemcache, so that both pick the same server for an item.
func lookupSRV(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	m := srvName.FindStringSubmatch(name)
	if m == nil {
		return nil, fmt.Errorf("memcachestore: SRV %q is not _service._proto.name", name)
	}
	_, recs, err := r.LookupSRV(ctx, m[1], m[2], m[3])
	if err != nil {
		return nil, fmt.Errorf("memcachestore: SRV %s: %w", name, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("memcachestore: SRV %s has no targets", name)
	}
	if len(recs) > MaxServers {
		return nil, fmt.Errorf("memcachestore: SRV %s has %d targets, more than %d", name, len(recs), MaxServers)
	}
	addrs := make([]string, len(recs))
	for i, rec := range recs {
		addrs[i] = net.JoinHostPort(rec.Target, strconv.Itoa(int(rec.Port)))
	}
	slices.Sort(addrs)
	return addrs, nil
}

// srvLookupTimeout bounds one refresh's lookup.
const srvLookupTimeout = 5 * time.Second

// refresh resolves the SRV name every SRVRefresh until Close.
func (s *Store) refresh() {
	t := time.NewTicker(s.opts.SRVRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), srvLookupTimeout)
		_ = s.refreshOnce(ctx)
		cancel()
	}
}

// refreshOnce resolves the SRV name and swaps in the new servers when
// they changed; a failed lookup keeps the old ones. Servers that stay
// keep their connections; the idle connections of the others are closed.
func (s *Store) refreshOnce(ctx context.Context) error {
	addrs, err := lookupSRV(ctx, s.opts.Resolver, s.opts.SRV)
	if err != nil {
		return err
	}
	s.mu.Lock() // one swap at a time, and none after Close
	defer s.mu.Unlock()
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	old := s.ring.Load()
	if slices.EqualFunc(old.servers, addrs, func(sv *server, a string) bool { return sv.addr == a }) {
		return nil
	}
	r := s.newRing(addrs, old)
	s.ring.Store(r)
	for _, sv := range old.servers {
		if !slices.Contains(r.servers, sv) {
			sv.close()
		}
	}
	return nil
}
