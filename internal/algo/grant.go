package algo

import (
	"errors"
	"sort"
)

// Grants: one limit shared by holders (regions) that each take units
// ahead of use and report what they need. A key's holder table keeps, per
// holder, its demand, the allowance reserved for its failure mode, and the
// units it has taken in the current window (epoch-aligned, of the limit's
// Period, as the fixed window's). GrantStep is the math of one grant, the
// single definition that memstore runs and redisstore's lua/grant.lua
// mirrors (the differential test holds them together).
//
// The pool of a window is the limit's Rate. Two rules size a grant, on
// top of the algorithm's own count (the units are admitted by its step, so
// the algorithm's bound holds whatever the table says):
//
//   - Reserve: Σ over holders of max(Taken, Allowance) never exceeds the
//     pool. A holder cut off from the store may admit, on its own, up to
//     its Allowance less what it took in a window: the others cannot take
//     that room, so what the holders admit together in a window (granted
//     units spent plus failure-mode admissions) stays within the pool.
//     GrantStep keeps the sum within the pool at every step: a grant only
//     fills room that no other holder's allowance reserves, an allowance
//     grows only into room nobody holds, and a new window or an expired
//     holder only lowers the sum. (A lower Rate than the table was built
//     under, or units reported spent beyond a holder's room, can leave the
//     sum above the pool; then nothing more is granted or reserved until
//     it is back within it: never more, only less.)
//   - Share: a holder takes at most max(Share, Allowance) in a window,
//     where Share is its fair share of the pool by demand (FairShares),
//     among the holders that reported within ShareTTL.
//
// An allowance shrinks only when its holder asks for less, and grows only
// as far as the room allows, so after any call the store holds at least
// min(what it held, what was asked): a holder that lost the answer to its
// call can still count on the smaller of its last confirmed allowance and
// what it asked for since.

// MaxHolders bounds the holders of one key's table; a new holder beyond
// it is refused (ErrTooManyHolders), so that a grant's work is bounded.
const MaxHolders = 64

// ShareTTL is how long (µs) a holder's demand counts in the shares after
// its last report. A holder that has not reported for longer (idle, or cut
// off from the store) gets no share, and the others share the pool; its
// allowance stays reserved until its row expires (Until).
const ShareTTL = 1_000_000

// MaxHolderLen bounds a holder's name, in bytes.
const MaxHolderLen = 64

// ErrTooManyHolders reports a grant for a new holder of a key whose table
// holds MaxHolders live holders.
var ErrTooManyHolders = errors.New("too many holders")

// Holder is one holder's row in a key's table.
type Holder struct {
	Name      string
	Seq       int64 // order of arrival: ties in the share math go by it
	Demand    int64 // units per Period, as the holder last reported
	Allowance int64 // reserved per window for the holder's failure mode
	Until     int64 // µs: the row expires at this time (its report's TTL)
	Seen      int64 // µs: the time of its last report
	Win       int64 // µs: the start of the window Taken counts in
	Taken     int64 // units taken in window Win (granted, or reported spent)
}

// taken is h's units taken in the window starting at ws. A row keeps the
// window it was last written in (only the requesting holder's row is
// written): a row of another window took nothing in this one.
func (h Holder) taken(ws int64) int64 {
	if h.Win != ws {
		return 0
	}
	return h.Taken
}

// GrantIn is one grant request: Holder asks for N units, reports its
// Demand (units per Period), the Allowance it wants reserved, the TTL (µs)
// of its report, and Spent units it admitted without a grant in the
// window starting at SpentWin (counted in its Taken when that window is
// the current one).
type GrantIn struct {
	Holder               string
	N, Demand, Allowance int64
	TTL                  int64
	SpentWin, Spent      int64
}

// GrantOut is the outcome for the holder: Units granted (to be admitted
// by the algorithm's step now), its Share and Allowance, its Taken in the
// window after the grant, the window's start, and the live holders.
type GrantOut struct {
	Units, Share, Allowance, Taken int64
	Window                         int64
	Holders                        int64
}

// GrantStep applies one request to the table hs (in any order) at now,
// for a limit of pool units per window of period µs, when the algorithm
// could admit free units now (its Remaining). It returns the new table,
// ordered by Seq, and the outcome; the caller admits Units with the
// algorithm's step (Units <= free, so it admits them) and keeps the table.
// A new holder when MaxHolders are live is ErrTooManyHolders, with hs
// unchanged.
func GrantStep(hs []Holder, now, pool, period int64, in GrantIn, free int64) ([]Holder, GrantOut, error) {
	ws := floorWindow(now, period)
	live := make([]Holder, 0, len(hs)+1)
	var maxSeq int64
	for _, h := range hs {
		if h.Until <= now {
			continue
		}
		maxSeq = max(maxSeq, h.Seq)
		live = append(live, h)
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Seq < live[j].Seq })
	gi := -1
	for i := range live {
		if live[i].Name == in.Holder {
			gi = i
		}
	}
	if gi < 0 {
		if len(live) >= MaxHolders {
			return hs, GrantOut{}, ErrTooManyHolders
		}
		live = append(live, Holder{Name: in.Holder, Seq: maxSeq + 1, Win: ws})
		gi = len(live) - 1
	}
	g := &live[gi]
	if g.Win != ws {
		g.Win, g.Taken = ws, 0
	}
	g.Demand = in.Demand
	g.Until = now + in.TTL
	g.Seen = now
	if in.Spent > 0 && in.SpentWin == ws {
		g.Taken = min(g.Taken+in.Spent, pool)
	}
	var others int64 // Σ over the others of max(taken in this window, Allowance)
	for i, h := range live {
		if i != gi {
			others += max(h.taken(ws), h.Allowance)
		}
	}
	if in.Allowance <= g.Allowance {
		g.Allowance = in.Allowance
	} else {
		g.Allowance = max(g.Allowance, min(in.Allowance, pool-others))
	}
	// The shares, among the holders heard from within ShareTTL.
	var demands []int64
	si := 0
	for i, h := range live {
		if i == gi {
			si = len(demands)
		}
		if i == gi || now-h.Seen <= ShareTTL {
			demands = append(demands, h.Demand)
		}
	}
	share := FairShares(pool, demands)[si]
	k := min(in.N, max(share, g.Allowance)-g.Taken, pool-others-g.Taken, free)
	k = max(k, 0)
	g.Taken += k
	return live, GrantOut{Units: k, Share: share, Allowance: g.Allowance, Taken: g.Taken, Window: ws, Holders: int64(len(live))}, nil
}

// FairShares divides pool among holders by their demands (listed in
// their order of arrival), in whole units, the shares adding up to pool
// exactly (for at least one holder):
//
//   - when the demands fit (their sum at most pool), each holder gets its
//     demand and an equal part of what is left, the remainder's units one
//     each to the earliest holders;
//   - otherwise max-min fairness (water-filling): every holder gets
//     min(demand, L) for the level L at which the shares fill the pool; the
//     units the level leaves over (pool not divisible) go one each to the
//     holders capped at the level, the smallest demands first (ties: the
//     earliest), never beyond a demand.
//
// So a holder asking for no more than an equal part gets all it asks, a
// quiet holder's unused part goes to the busy ones, and under saturation
// every holder gets an equal part. Work is O(h log h) for h holders.
func FairShares(pool int64, demands []int64) []int64 {
	n := len(demands)
	out := make([]int64, n)
	if n == 0 {
		return out
	}
	var sum int64
	for _, d := range demands {
		sum += d
	}
	if sum <= pool {
		spare := pool - sum
		each, extra := spare/int64(n), spare%int64(n)
		for i, d := range demands {
			out[i] = d + each
			if int64(i) < extra {
				out[i]++
			}
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		da, db := demands[order[a]], demands[order[b]]
		return da < db || da == db && order[a] < order[b]
	})
	rem, left := pool, int64(n)
	for j, i := range order {
		lvl := rem / left
		if demands[i] <= lvl {
			out[i] = demands[i]
			rem -= demands[i]
			left--
			continue
		}
		extra := rem - lvl*left
		for m, r := range order[j:] {
			out[r] = lvl
			if int64(m) < extra {
				out[r]++
			}
		}
		break
	}
	return out
}
