package server

import (
	"hash/maphash"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clientip"
)

// MaxPermitLedger bounds the permits the server counts for their clients
// at once (Bounds.MaxPermitsPerClient): some 64 bytes each. Past it, the
// permits whose lease ended are dropped, and while it stays full a new
// permit is refused (503).
const MaxPermitLedger = 1 << 20

// permitID identifies a permit (its key and holder) by a 128-bit hash: the
// ledger keeps neither string.
type permitID [2]uint64

// permitClients counts the permits each client holds through this server,
// so that one client cannot hold the store's table of permits (shared by
// every caller, and bounded) for long: an acquire of a client that holds
// Bounds.MaxPermitsPerClient permits is refused until one of them is
// released or its lease ends. The count is the server's own (permits
// acquired through another replica, or before a restart, are not in it)
// and is kept by the server's clock, from the lease each acquire or
// extend asked for.
type permitClients struct {
	seeds [2]maphash.Seed
	now   func() time.Time

	mu      sync.Mutex
	clients map[string]*heldBy
	owner   map[permitID]*heldBy // the client each counted permit is counted for
	swept   time.Time            // the last sweep of the whole ledger
}

// heldBy is one client's permits and the end of each one's lease.
type heldBy struct {
	client string
	ends   map[permitID]time.Time
}

func newPermitClients() *permitClients {
	return &permitClients{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, now: time.Now,
		clients: map[string]*heldBy{}, owner: map[permitID]*heldBy{}}
}

func (p *permitClients) id(key, holder string) permitID {
	var id permitID
	for i, seed := range p.seeds {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(key)
		h.WriteByte(0)
		h.WriteString(holder)
		id[i] = h.Sum64()
	}
	return id
}

// reserve counts the permit id for client before the store is asked, its
// lease ending after lease. A permit already counted is not counted again
// (reserved is false). ok is false when the client holds max permits
// whose lease has not ended (retry: until the earliest ends) or the ledger
// is full (retry 0).
func (p *permitClients) reserve(client string, id permitID, lease time.Duration, max int) (ok, reserved bool, retry time.Duration) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, counted := p.owner[id]; counted {
		return true, false, 0
	}
	h := p.clients[client]
	if h == nil {
		h = &heldBy{client: client, ends: map[permitID]time.Time{}}
		p.clients[client] = h
	}
	p.expire(h, now)
	if len(h.ends) >= max {
		earliest := time.Time{}
		for _, end := range h.ends {
			if earliest.IsZero() || end.Before(earliest) {
				earliest = end
			}
		}
		return false, false, earliest.Sub(now)
	}
	if len(p.owner) >= MaxPermitLedger {
		p.sweep(now)
		if len(p.owner) >= MaxPermitLedger {
			p.drop(h)
			return false, false, 0
		}
	}
	h.ends[id] = now.Add(lease)
	p.owner[id] = h
	return true, true, 0
}

// settle ends a reservation: kept when the permit was acquired, dropped
// when it was not.
func (p *permitClients) settle(id permitID, reserved, acquired bool) {
	if reserved && !acquired {
		p.release(id)
	}
}

// extend moves the end of a counted permit's lease.
func (p *permitClients) extend(id permitID, lease time.Duration) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.owner[id]; h != nil {
		h.ends[id] = now.Add(lease)
	}
}

// release stops counting the permit id.
func (p *permitClients) release(id permitID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.owner[id]; h != nil {
		delete(h.ends, id)
		delete(p.owner, id)
		p.drop(h)
	}
}

// expire stops counting h's permits whose lease has ended.
func (p *permitClients) expire(h *heldBy, now time.Time) {
	for id, end := range h.ends {
		if !end.After(now) {
			delete(h.ends, id)
			delete(p.owner, id)
		}
	}
}

// drop forgets a client that holds nothing.
func (p *permitClients) drop(h *heldBy) {
	if len(h.ends) == 0 {
		delete(p.clients, h.client)
	}
}

// sweep stops counting every permit whose lease has ended, at most once a
// second (it visits the whole ledger).
func (p *permitClients) sweep(now time.Time) {
	if now.Sub(p.swept) < time.Second {
		return
	}
	p.swept = now
	for _, h := range p.clients {
		p.expire(h, now)
		p.drop(h)
	}
}

// held is how many permits client is counted for.
func (p *permitClients) held(client string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.clients[client]; h != nil {
		return len(h.ends)
	}
	return 0
}

// permitClient is the client of a permit request: its address as
// /v1/auth establishes it (the socket peer, or behind a trusted proxy the
// address the proxy forwards), or, when a trusted proxy forwards none, the
// proxy's own.
func (s *Server) permitClient(r *http.Request) string {
	src := Source{Key: "client", Headers: []string{clientip.XForwardedFor, clientip.XRealIP}, Address: true}
	if key, _, err := s.auth.Identity.client(r, src); err == nil {
		return key
	}
	if peer, err := clientip.Peer(r.RemoteAddr); err == nil {
		return clientip.Key(peer, s.auth.Identity.IPv6Bits)
	}
	return r.RemoteAddr
}
