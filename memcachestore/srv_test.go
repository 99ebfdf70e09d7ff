package memcachestore_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testserver/memcachedtest"
	"github.com/sluicehq/sluice/memcachestore"
)

// dnsServer answers, on a loopback UDP port, SRV queries for
// _memcache._tcp.sluice.test with the ports it is given (target
// mc.sluice.test.), A queries for mc.sluice.test with 127.0.0.1, AAAA
// queries for it with nothing, and everything else with NXDOMAIN.
type dnsServer struct {
	pc    net.PacketConn
	mu    sync.Mutex
	ports []int
}

func newDNSServer(t *testing.T, ports ...int) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{pc: pc, ports: ports}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return d
}

func (d *dnsServer) set(ports ...int) {
	d.mu.Lock()
	d.ports = ports
	d.mu.Unlock()
}

func (d *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
		d.mu.Lock()
		ports := d.ports
		d.mu.Unlock()
		srv := q.Type == dnsmessage.TypeSRV && q.Name.String() == "_memcache._tcp.sluice.test."
		host := q.Name.String() == "mc.sluice.test." && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeAAAA)
		if !srv && !host {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
		switch {
		case srv:
			for _, port := range ports {
				_ = b.SRVResource(rr, dnsmessage.SRVResource{Priority: 10, Weight: 10, Port: uint16(port), Target: dnsmessage.MustNewName("mc.sluice.test.")})
			}
		case host && q.Type == dnsmessage.TypeA:
			_ = b.AResource(rr, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		_, _ = d.pc.WriteTo(msg, from)
	}
}

// resolver sends every DNS query to d.
func (d *dnsServer) resolver() *net.Resolver {
	addr := d.pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "udp", addr)
	}}
}

// TestSRV: the servers are the SRV name's targets, sorted; a refresh
// swaps in a changed set, keeps it on a failed lookup, and stops with
// Close.
func TestSRV(t *testing.T) {
	a, b := memcachedtest.Server(t), memcachedtest.Server(t)
	dns := newDNSServer(t, b.Port, a.Port)
	s, err := memcachestore.Open(ctx, memcachestore.Options{SRV: "_memcache._tcp.sluice.test", Resolver: dns.resolver(), SRVRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sorted := []string{"mc.sluice.test.:" + strconv.Itoa(a.Port), "mc.sluice.test.:" + strconv.Itoa(b.Port)}
	if sorted[1] < sorted[0] {
		sorted[0], sorted[1] = sorted[1], sorted[0]
	}
	if got, want := s.String(), "memcache("+strings.Join(sorted, ",")+")"; got != want {
		t.Errorf("servers from SRV: %s, want %s (sorted as text)", got, want)
	}
	lim := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour}
	for i := range 10 {
		allow(t, s, "k"+strconv.Itoa(i), lim, 1)
	}
	dns.set(b.Port)
	if err := s.RefreshSRV(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "memcache(mc.sluice.test.:"+strconv.Itoa(b.Port)+")"; got != want {
		t.Errorf("servers after the refresh: %s, want %s", got, want)
	}
	a.Kill() // no item lives there any more
	for i := range 10 {
		if _, err := s.AllowN(ctx, "k"+strconv.Itoa(i), lim, 1); err != nil {
			t.Errorf("AllowN after the refresh: %v", err)
		}
	}
	dns.pc.Close() // lookups fail now: the servers stay
	if err := s.RefreshSRV(ctx); err == nil {
		t.Error("RefreshSRV with the DNS server gone: nil error")
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after a failed refresh: %v", err)
	}
	s.Close()
	if err := s.RefreshSRV(ctx); err == nil {
		t.Error("RefreshSRV after Close: nil error")
	}
	for _, tt := range []struct {
		srv, want string
	}{
		{"_memcache._tcp.sluice.test", "SRV _memcache._tcp.sluice.test"}, // no targets
		{"_other._tcp.sluice.test", "SRV _other._tcp.sluice.test"},
	} {
		dns2 := newDNSServer(t)
		if _, err := memcachestore.New(ctx, memcachestore.Options{SRV: tt.srv, Resolver: dns2.resolver()}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(SRV %s) = %v, want an error with %q", tt.srv, err, tt.want)
		}
	}
}
