package redisstore

import (
	"math/rand/v2"
	"strconv"

	"github.com/sluicehq/sluice"
)

// limitArgs are a Limit's values in the scripts (A, B and, for some kinds,
// C), in the units of internal/algo.Params, with their decimal forms,
// cached per Limit (Store.limitArgs) so that a decision formats none.
type limitArgs struct {
	vals [3]int64
	strs [3]string // vals[:n] in decimal; "" after them
	n    int       // values cached: the millisecond layout adds its random third per call
}

// limitValues is how many limit values a kind's script takes.
func limitValues(kind int) int {
	switch baseKind(kind) {
	case int(sluice.TokenBucket), int(sluice.GCRA), kindMsLog:
		return 3
	}
	return 2
}

func (s *Store) limitArgs(lim sluice.Limit) *limitArgs {
	if v, ok := s.argCache.Load(lim); ok {
		return v.(*limitArgs)
	}
	p := params(lim)
	a := &limitArgs{}
	switch baseKind(s.kind(lim)) {
	case int(sluice.TokenBucket), int(sluice.GCRA):
		a.vals, a.n = [3]int64{p.Cap * p.P, p.P, p.R}, 3
	case kindMsLog:
		a.vals, a.n = [3]int64{p.Rate, p.Period / 1000}, 2 // + a random number per call
	default:
		a.vals, a.n = [3]int64{p.Rate, p.Period}, 2
	}
	for i, v := range a.vals[:a.n] {
		a.strs[i] = strconv.FormatInt(v, 10)
	}
	if s.argCached.Load() < maxArgCache {
		s.argCached.Add(1)
		s.argCache.Store(lim, a)
	}
	return a
}

// maxArgCache bounds the Limits whose script arguments a Store keeps.
const maxArgCache = 4096

// decisionArgs are one decision's script arguments, typed until they are
// written to the wire (appendSingle, appendAll).
type decisionArgs struct {
	kind int
	n    int
	lim  *limitArgs
	rnd  uint32 // the millisecond layout's third value: the first new member's random number
	now  int64  // the test clock's time in µs (Store.clock), else 0
}

// newArgs are the arguments of deciding n under lim.
func (s *Store) newArgs(lim sluice.Limit, n int) decisionArgs {
	a := decisionArgs{kind: s.kind(lim), n: n, lim: s.limitArgs(lim)}
	if a.kind == kindMsLog {
		a.rnd = rand.Uint32()
	}
	if s.clock != nil {
		a.now = s.clock().UnixMicro()
	}
	return a
}

// same reports whether a and b decide alike: the batch script reads a
// group of equal arguments once.
func (a *decisionArgs) same(b *decisionArgs) bool {
	return a.kind == b.kind && a.n == b.n && a.lim.vals == b.lim.vals && a.rnd == b.rnd && a.now == b.now
}

// third is the decimal form of the limit's third value, "" when the kind
// has none.
func (a *decisionArgs) third() string {
	if a.kind == kindMsLog {
		return strconv.FormatUint(uint64(a.rnd), 10)
	}
	return a.lim.strs[2]
}

// appendSingle appends the ARGV of single.lua: n, the kind's limit
// values, and with a test clock (clocked) its time and the TTL slack.
func (a *decisionArgs) appendSingle(args []string, clocked bool) []string {
	args = append(args, strconv.Itoa(a.n), a.lim.strs[0], a.lim.strs[1])
	if limitValues(a.kind) == 3 {
		args = append(args, a.third())
	}
	if clocked {
		args = append(args, strconv.FormatInt(a.now, 10), testSlack)
	}
	return args
}

// appendAll appends kind, n and three limit values ("" for an unused
// one): a decision in batch.lua, multi.lua and return.lua.
func (a *decisionArgs) appendAll(args []string) []string {
	return append(args, kindArgs[a.kind], strconv.Itoa(a.n), a.lim.strs[0], a.lim.strs[1], a.third())
}

// timeArg is a decision's test time on the wire: "" for Redis's TIME.
func (a *decisionArgs) timeArg(clocked bool) string {
	if !clocked {
		return ""
	}
	return strconv.FormatInt(a.now, 10)
}

// kindArgs are the kinds' decimal forms.
var kindArgs = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}

// testSlack is testSlackMs on the wire.
var testSlack = strconv.Itoa(testSlackMs)

// clockArgs are the first two ARGV of the batch, multi and return
// scripts: the test clock's time ("" for Redis's TIME) and the TTL slack.
func (s *Store) clockArgs(args []string) []string {
	if s.clock == nil {
		return append(args, "", "0")
	}
	return append(args, strconv.FormatInt(s.clock().UnixMicro(), 10), testSlack)
}
