package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/validate"
)

var _ sluice.Granter = (*Store)(nil)

// shareTTL is internal/algo.ShareTTL on the wire.
var shareTTL = strconv.Itoa(algo.ShareTTL)

// grantScript is Grant's: lua/grant.lua after the prologue and the
// counter algorithms' files.
var grantScript = assemble("grant", 1, []string{"fixed_window", "sliding_window", "gcra"}, "grant")

// Grant implements sluice.Granter in one script (lua/grant.lua, held to
// internal/algo.GrantStep by the differential test): the key's holder
// table, a hash next to its state (its name is the state's with ":h"
// added, in the same hash slot), is updated and the units granted are
// admitted by the algorithm's step, atomically, on Redis's clock. The
// script's work is bounded by sluice.MaxGrantHolders rows. A Reset of the
// key leaves its holder table as it is. The table expires with its
// longest-lived row's TTL.
func (s *Store) Grant(ctx context.Context, key string, lim sluice.Limit, r sluice.GrantRequest) (sluice.Grant, error) {
	if err := s.check(ctx, key, lim, 0); err != nil {
		return sluice.Grant{}, err
	}
	if err := validate.Grant(key, lim, r); err != nil {
		return sluice.Grant{}, err
	}
	state := s.redisKey(key, lim)
	la := s.limitArgs(lim)
	notAfter, spentWin := "", ""
	if !r.NotAfter.IsZero() {
		notAfter = strconv.FormatInt(r.NotAfter.UnixMicro(), 10)
	}
	if !r.SpentWindow.IsZero() {
		spentWin = strconv.FormatInt(r.SpentWindow.UnixMicro(), 10)
	}
	args := s.clockArgs(make([]string, 0, 18))
	args = append(args, kindArgs[s.kind(lim)], strconv.Itoa(r.N), la.strs[0], la.strs[1], la.strs[2],
		r.Holder, strconv.Itoa(r.Demand), strconv.Itoa(r.Allowance), strconv.FormatInt(r.TTL.Microseconds(), 10),
		notAfter, strconv.Itoa(lim.Rate), strconv.FormatInt(lim.Period.Microseconds(), 10),
		spentWin, strconv.Itoa(r.Spent), strconv.Itoa(sluice.MaxGrantHolders), shareTTL)
	res, err := s.run(ctx, grantScript, []string{state, state + ":h"}, args)
	if err != nil {
		return sluice.Grant{}, err
	}
	if len(res) != 11 {
		return sluice.Grant{}, fmt.Errorf("redisstore: eval grant: reply has %d values, want 11", len(res))
	}
	switch res[0] {
	case 2:
		return sluice.Grant{Decision: sluice.Decision{Limit: lim}, At: time.UnixMicro(res[2]), Stale: true}, nil
	case 3:
		return sluice.Grant{}, fmt.Errorf("redisstore: grant: %w", sluice.ErrTooManyHolders)
	}
	g := sluice.Grant{
		Units: int(res[1]), At: time.UnixMicro(res[2]),
		Share: int(res[3]), Allowance: int(res[4]), Taken: int(res[5]), Holders: int(res[6]),
		Window: time.UnixMicro(res[7]),
	}
	g.Allowed = g.Units > 0 || r.N == 0
	g.Limit = lim
	g.Remaining = int(res[8])
	g.RetryAfter = time.Duration(res[9]) * time.Microsecond
	g.ResetAfter = time.Duration(res[10]) * time.Microsecond
	return g, nil
}
