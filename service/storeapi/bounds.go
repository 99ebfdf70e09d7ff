package storeapi

import (
	"fmt"

	"github.com/sluicehq/sluice"
	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
	"github.com/sluicehq/sluice/internal/storewire"
	"github.com/sluicehq/sluice/internal/validate"
)

// request checks a key, limit and cost against the library's key bound
// and the server's bounds, and returns them as the store takes them. The
// rest (a Rate of 0, a Period of 1.5µs, a cost beyond the capacity) the
// store checks itself, with the library's errors, before any lock or
// script.
func (s *Server) request(k []byte, pl *storev1.Limit, pn int64) (string, sluice.Limit, int, error) {
	key, err := checkKey(k)
	if err != nil {
		return "", sluice.Limit{}, 0, err
	}
	lim, err := s.limit(pl)
	if err != nil {
		return "", sluice.Limit{}, 0, err
	}
	n, err := s.cost(pn)
	if err != nil {
		return "", sluice.Limit{}, 0, err
	}
	return key, lim, n, nil
}

// grant checks a Grant's request: key, limit and n as AllowN's, then the
// request's fields by their bounds (storewire.ToGrantRequest) and against
// the limit (validate.Grant), so that nothing reaches the granter that it
// would refuse.
func (s *Server) grant(p *storev1.GrantRequest) (string, sluice.Limit, sluice.GrantRequest, error) {
	key, lim, _, err := s.request(p.GetKey(), p.GetLimit(), p.GetN())
	if err != nil {
		return "", lim, sluice.GrantRequest{}, err
	}
	r, err := storewire.ToGrantRequest(p)
	if err != nil {
		return "", lim, r, err
	}
	if err := validate.Grant(key, lim, r); err != nil {
		return "", lim, r, err
	}
	return key, lim, r, nil
}

// checkKey is k as a key, or the *sluice.LimitError of an empty key or
// one longer than sluice.MaxKeyLen.
func checkKey(k []byte) (string, error) {
	key := string(k) // at most MaxMessageSize bytes

	return key, sluice.ValidateKey(key)
}

// checkHolder is h as a holder id, or the *sluice.LimitError of an empty
// one or one longer than sluice.MaxHolderLen.
func checkHolder(h []byte) (string, error) {
	holder := string(h)
	return holder, sluice.ValidateHolder(holder)
}

// limit is the limit of p within the server's bounds.
func (s *Server) limit(p *storev1.Limit) (sluice.Limit, error) {
	lim, err := storewire.ToLimit(p)
	if err != nil {
		return lim, err
	}
	b := &s.bounds
	switch {
	case b.MaxRate > 0 && lim.Rate > b.MaxRate:
		return lim, beyond("Rate", "Rate %d exceeds the server's bound %d (--max-rate)", lim.Rate, b.MaxRate)
	case lim.Algorithm == sluice.SlidingLog && b.MaxLogRate > 0 && lim.Rate > b.MaxLogRate:
		return lim, beyond("Rate", "Rate %d of a sliding log exceeds the server's bound %d (--max-log-rate)", lim.Rate, b.MaxLogRate)
	case b.MaxBurst > 0 && lim.Burst > b.MaxBurst:
		return lim, beyond("Burst", "Burst %d exceeds the server's bound %d (--max-burst)", lim.Burst, b.MaxBurst)
	case b.MaxPeriod > 0 && lim.Period > b.MaxPeriod:
		return lim, beyond("Period", "Period %v exceeds the server's bound %v (--max-period)", lim.Period, b.MaxPeriod)
	}
	return lim, nil
}

// cost is n within the server's bound on hits. A negative n goes to the
// store, which names it.
func (s *Server) cost(n int64) (int, error) {
	if m := s.bounds.MaxHits; m > 0 && n > int64(m) {
		return 0, &sluice.LimitError{Field: "N", Reason: fmt.Sprintf("n = %d exceeds the server's bound %d (--max-hits)", n, m), Err: sluice.ErrExceedsCapacity}
	}
	return storewire.ToCost(n)
}

// multi checks an AllowMulti: its size by the library's bounds
// (sluice.MaxMultiRequests, validate.Multi), checked before a request is
// converted, and each request as AllowN's.
func (s *Server) multi(ps []*storev1.Request) ([]sluice.Request, error) {
	if len(ps) > sluice.MaxMultiRequests {
		return nil, &sluice.LimitError{Field: "Requests", Reason: fmt.Sprintf("AllowMulti of %d requests, more than %d at once", len(ps), sluice.MaxMultiRequests), Err: sluice.ErrExceedsCapacity}
	}
	reqs := make([]sluice.Request, len(ps))
	for i, p := range ps {
		key, lim, n, err := s.request(p.GetKey(), p.GetLimit(), p.GetN())
		if err != nil {
			return nil, err
		}
		reqs[i] = sluice.Request{Key: key, Limit: lim, N: n}
	}
	if err := validate.Multi(reqs); err != nil {
		return nil, err
	}
	return reqs, nil
}

// permit checks a key, concurrency limit and holder: the key and holder
// by the library's bounds, Max and the TTL by the server's. The rest (Max below 1, a
// TTL out of range) the store checks.
func (s *Server) permit(k []byte, pl *storev1.ConcurrencyLimit, h []byte) (string, sluice.ConcurrencyLimit, string, error) {
	key, err := checkKey(k)
	if err != nil {
		return "", sluice.ConcurrencyLimit{}, "", err
	}
	lim, err := storewire.ToConcurrency(pl)
	if err != nil {
		return "", lim, "", err
	}
	if m := s.bounds.MaxPermits; m > 0 && lim.Max > m {
		return "", lim, "", beyond("Max", "Max %d exceeds the server's bound %d (--max-permits)", lim.Max, m)
	}
	if m := s.bounds.MaxPermitLease; m > 0 && lim.Normalize().TTL > m {
		return "", lim, "", beyond("TTL", "TTL %v exceeds the server's bound %v (--max-permit-lease)", lim.Normalize().TTL, m)
	}
	holder, err := checkHolder(h)
	if err != nil {
		return "", lim, "", err
	}
	return key, lim, holder, nil
}

func beyond(field, format string, args ...any) error {
	return &sluice.LimitError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
