package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.Granter = (*Store)(nil)

// grantKey names a holder table: a state's key, algorithm and period.
type grantKey struct {
	key    string
	kind   algo.Kind
	period int64
}

// grantTable is one key's holders (algo.GrantStep), and the time after
// which none of them matters.
type grantTable struct {
	rows  []algo.Holder
	until int64
}

// Grant implements sluice.Granter with internal/algo.GrantStep, the
// reference of every store's grants: under the key's shard lock, the
// holder table is updated and the units granted are admitted by the
// algorithm's step, in one atomic step. A Reset of the key leaves its
// holder table (shares, allowances and the window's taken units) as it
// is. Holder tables count towards WithMaxKeys: a new one when the
// shard holds its share of them, none expired, is refused with an error
// wrapping sluice.ErrExceedsCapacity.
func (s *Store) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	if s.closed.Load() {
		return sluice.Grant{}, s.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return sluice.Grant{}, err
	}
	if err := validate.Grant(key, lim, r); err != nil {
		return sluice.Grant{}, err
	}
	p, err := s.limits.Params(lim)
	if err != nil {
		return sluice.Grant{}, err
	}
	kh := maphash.String(s.seed, key)
	h := stateHash(kh, p)
	sh := &s.shards[kh&s.mask]
	now := s.nowMicro()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out, err := sh.grant(s, h, key, p, now, r)
	if err != nil {
		return sluice.Grant{}, err
	}
	out.Limit = sluice.Limit{Algorithm: lim.Algorithm, Rate: lim.Rate, Period: lim.Period, Burst: lim.Burst, Counting: lim.Counting}
	return out, nil
}

// grant applies r to the holder table and the state of (h, key) under
// sh.mu.
func (sh *shard) grant(s *Store, h uint64, key string, p *algo.Params, now int64, r sluice.GrantRequest) (sluice.Grant, error) {
	if !r.NotAfter.IsZero() && now > r.NotAfter.UnixMicro() {
		return sluice.Grant{At: time.UnixMicro(now), Stale: true}, nil
	}
	gk := grantKey{key, p.Kind, p.Period}
	tab := sh.grants[gk]
	if tab == nil {
		if s.maxKeys > 0 && len(sh.grants) >= max(sh.cap, 1) {
			sh.sweepGrants(now)
		}
		if s.maxKeys > 0 && len(sh.grants) >= max(sh.cap, 1) {
			return sluice.Grant{}, fmt.Errorf("memstore: grant: %w: the store holds its maximum of holder tables (WithMaxKeys)", sluice.ErrExceedsCapacity)
		}
		tab = &grantTable{}
	}

	// The state as a decision sees it: absent or expired, a fresh one.
	var fresh entry
	st := &fresh
	i := sh.lookupH(h, p.Period, key)
	if i >= 0 {
		st = &sh.slots[i]
		if st.expires <= now {
			sh.reset(st)
		}
	}
	peek := sh.step(st, now, p, 0, false)
	in := algo.GrantIn{
		Holder: r.Holder, N: int64(r.N), Demand: int64(r.Demand), Allowance: int64(r.Allowance),
		TTL: r.TTL.Microseconds(), SpentWin: r.SpentWindow.UnixMicro(), Spent: int64(r.Spent),
	}
	if r.SpentWindow.IsZero() {
		in.Spent = 0
	}
	rows, out, err := algo.GrantStep(tab.rows, now, p.Rate, p.Period, in, peek.Remaining)
	if err != nil {
		return sluice.Grant{}, fmt.Errorf("memstore: grant: %w", sluice.ErrTooManyHolders)
	}
	res, at := peek, now
	if out.Units > 0 {
		res = sh.step(st, now, p, out.Units, true)
		if !res.Allowed { // Units <= Remaining: the step admits them
			return sluice.Grant{}, fmt.Errorf("memstore: grant: internal error: the step denied %d units of %d remaining", out.Units, peek.Remaining)
		}
		if st == &fresh {
			sh.insertH(h, p.Period, key, now, s).setState(&fresh)
			sh.noteExpiry(fresh.expires)
			st = &sh.slots[sh.lookupH(h, p.Period, key)]
		}
		at = sh.stamp(st, now, p)
	} else if peek.Remaining == 0 && r.N > 0 {
		res = sh.step(st, now, p, 1, false) // the wait for one unit
	}
	tab.rows = rows
	tab.until = 0
	for _, row := range rows {
		tab.until = max(tab.until, row.Until)
	}
	if sh.grants == nil {
		sh.grants = make(map[grantKey]*grantTable)
	}
	sh.grants[gk] = tab

	g := sluice.Grant{
		Units: int(out.Units), At: time.UnixMicro(at),
		Share: int(out.Share), Allowance: int(out.Allowance), Taken: int(out.Taken), Holders: int(out.Holders),
		Window: time.UnixMicro(out.Window),
	}
	g.Allowed = out.Units > 0 || r.N == 0
	g.Remaining = int(res.Remaining)
	g.ResetAfter = time.Duration(res.ResetAfter) * time.Microsecond
	if !g.Allowed {
		g.RetryAfter = time.Duration(grantRetry(res, peek.Remaining, now, p.Period)) * time.Microsecond
	}
	return g, nil
}

// grantRetry is a refused grant's RetryAfter (µs): the algorithm's wait
// for one unit (res) when it has none free, else the end of the window,
// when the holder's share or the others' allowances free again.
func grantRetry(res algo.Result, free, now, period int64) int64 {
	if free == 0 {
		return res.RetryAfter
	}
	return algo.WindowLeft(now, period)
}

// sweepGrants removes the holder tables whose every row has expired.
func (s *Store) sweepGrants(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweepGrants(now)
		sh.mu.Unlock()
	}
}

// sweepGrants removes the shard's expired holder tables. sh.mu is held.
func (sh *shard) sweepGrants(now int64) {
	for k, t := range sh.grants {
		if t.until <= now {
			delete(sh.grants, k)
		}
	}
	if len(sh.grants) == 0 {
		sh.grants = nil
	}
}

// GrantTables reports the holder tables held, expired ones not yet swept
// included.
func (s *Store) GrantTables() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.grants)
		sh.mu.Unlock()
	}
	return n
}
