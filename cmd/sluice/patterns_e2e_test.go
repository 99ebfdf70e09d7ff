package main

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// The two patterns of charges made after the response, end to end against
// the built binary on Redis: a token budget (check at 0, charge the tokens
// used after each stream) and an in-flight limit (consume 1 at the start,
// give it back at the end).

const patternsConfig = `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000000, name: tokens}
  - key: streams
    rate_limit: {unit: day, requests_per_unit: 5, name: in_flight}
`

// awayFromDayEdge waits, when needed, so that the next minute stays in one
// UTC day: the patterns' limits are daily fixed windows.
func awayFromDayEdge() {
	now := time.Now().UTC()
	end := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if left := end.Sub(now); left < 2*time.Minute {
		time.Sleep(left + time.Second)
	}
}

// descHits is a descriptor of one entry with its own hits_addend, which may
// be 0 (a request's hits_addend of 0 means 1).
func descHits(key, value string, hits uint64, negative bool) *rlpb.RateLimitDescriptor {
	return &rlpb.RateLimitDescriptor{
		Entries:        []*rlpb.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		HitsAddend:     wrapperspb.UInt64(hits),
		IsNegativeHits: negative,
	}
}

func (p *proc) decide(ctx context.Context, ds ...*rlpb.RateLimitDescriptor) (*pb.RateLimitResponse, error) {
	return p.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "ai", Descriptors: ds})
}

func TestE2EPatterns(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// settle is how long the test waits for the local tier to give
		// back the units it leased and did not spend (its lease lifetime,
		// 200ms, and a sweep: the wait only ends a tier that never gives
		// them back); 0 without a tier.
		settle time.Duration
	}{
		{"redis", nil, 0},
		{"redis-tiered", []string{"--tiered", "--lease-max", "10", "--lease-fraction", "0.5", "--lease-lifetime", "200ms"}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.Server(t)
			cfg := filepath.Join(t.TempDir(), "ai.yaml")
			writeFile(t, cfg, patternsConfig)
			args := append([]string{"--config", cfg, "--redis", "redis://" + r.Addr, "--redis-timeout", "5s", "--counting", "all"}, tc.args...)
			p := start(t, nil, args...)
			awayFromDayEdge()
			t.Run("TokenBudget", func(t *testing.T) { testTokenBudget(t, p) })
			t.Run("InFlight", func(t *testing.T) { testInFlight(t, p, tc.settle) })
		})
	}
}

// testTokenBudget runs concurrent streams against a budget of 1,000,000
// tokens: each checks at hits_addend 0 and, when admitted, charges the
// tokens it used. Every charge is recorded, the one that overdraws
// included, and once the budget is overdrawn no check admits.
func testTokenBudget(t *testing.T, p *proc) {
	const budget, workers = 1000000, 16
	// The run ends on counts (the budget overdrawn, 50 denials); the
	// deadline only ends a hung one.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var (
		charged   atomic.Int64 // sum of all charges sent and answered
		overdrawn atomic.Bool  // a charge was answered OVER_LIMIT: the budget is in debt
		admits    atomic.Int64 // checks admitted
		lateAdmit atomic.Int64 // checks admitted that started after the budget was overdrawn
		denials   atomic.Int64
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				wasOver := overdrawn.Load()
				resp, err := p.decide(ctx, descHits("tenant", "acme", 0, false))
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if resp.OverallCode != pb.RateLimitResponse_OK {
					denials.Add(1)
					if denials.Load() > 50 {
						return // the budget refuses: enough seen
					}
					continue
				}
				admits.Add(1)
				if wasOver {
					lateAdmit.Add(1)
				}
				tokens := uint64(1 + rng.IntN(5000)) // the stream's usage, known after it
				resp, err = p.decide(ctx, descHits("tenant", "acme", tokens, false))
				if err != nil {
					t.Errorf("charge of %d: %v", tokens, err)
					return
				}
				charged.Add(int64(tokens))
				if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
					overdrawn.Store(true)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := charged.Load()
	t.Logf("token budget %d: %d checks admitted, %d charged in all (%.2f× the budget), %d denials", budget, admits.Load(), total, float64(total)/budget, denials.Load())
	if !overdrawn.Load() || total <= budget {
		t.Fatalf("charged %d, overdrawn %v: the run never overdrew the budget of %d", total, overdrawn.Load(), budget)
	}
	if n := lateAdmit.Load(); n > 0 {
		t.Errorf("%d checks admitted after the budget was overdrawn", n)
	}
	// The store holds exactly the sum of the charges: a check now is
	// denied, and giving back all but 7 of the debt beyond the budget
	// leaves exactly 7 remaining. A charge that was lost would leave more.
	resp, err := p.decide(ctx, descHits("tenant", "acme", 0, false))
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("check after the run: %v, %v; want OVER_LIMIT", resp, err)
	}
	if _, err := p.decide(ctx, descHits("tenant", "acme", uint64(total-budget+7), true)); err != nil {
		t.Fatalf("refund: %v", err)
	}
	resp, err = p.decide(ctx, descHits("tenant", "acme", 0, false))
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != 7 {
		t.Errorf("after refunding %d of %d charged: %v remaining %d, want OK with 7 (the store recorded %d)",
			total-budget+7, total, resp.OverallCode, st.LimitRemaining, total+7-int64(st.LimitRemaining))
	}
}

// testInFlight consumes 1 of a limit of 5 at each stream's start and gives
// it back at its end, as Envoy does with apply_on_stream_done: the refund
// is sent for every start, a refused one included, so the limit counts
// every hit (--counting all), and a refused start's charge is given back
// by its refund. No more than 5 streams are ever in flight, and the slots
// are reused.
//
// A local tier leases units ahead and spends them locally: until it gives
// back those it did not spend (within settle), they count as taken.
func testInFlight(t *testing.T, p *proc, settle time.Duration) {
	const limit, workers, streams = 5, 16, 20
	// The run ends on counts (every worker's streams); the deadline only
	// ends a hung one.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var inFlight, peak, started, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for done := 0; done < streams && ctx.Err() == nil; {
				resp, err := p.decide(ctx, descHits("streams", "acme", 1, false))
				if err != nil {
					t.Errorf("start: %v", err)
					return
				}
				if resp.OverallCode != pb.RateLimitResponse_OK {
					refused.Add(1)
					// The refused stream ends at once: its refund
					// gives back the charge of its start.
					if _, err := p.decide(ctx, descHits("streams", "acme", 1, true)); err != nil {
						t.Errorf("refund of a refused start: %v", err)
						return
					}
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					continue
				}
				done++
				started.Add(1)
				n := inFlight.Add(1)
				for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				// The stream ends: it leaves the count before its slot is
				// given back, so that the count never lags the store.
				inFlight.Add(-1)
				if _, err := p.decide(ctx, descHits("streams", "acme", 1, true)); err != nil {
					t.Errorf("refund: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("in-flight limit %d: %d streams ran, %d starts refused, at most %d in flight", limit, started.Load(), refused.Load(), peak.Load())
	if got := peak.Load(); got > limit {
		t.Errorf("%d streams in flight at once, limit %d", got, limit)
	}
	if got := started.Load(); got != workers*streams {
		t.Errorf("%d streams ran, want %d (slots given back are reused)", got, workers*streams)
	}
	if refused.Load() == 0 {
		t.Errorf("no start was refused: %d workers never contended for %d slots", workers, limit)
	}
	// Every slot is back: at once on the shared store, once the tier has
	// given back what it leased otherwise.
	for deadline := time.Now().Add(settle); ; time.Sleep(50 * time.Millisecond) {
		resp, err := p.decide(ctx, descHits("streams", "acme", 0, false))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		if st.LimitRemaining == limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after all streams ended (and %v): remaining %d, want %d", settle, st.LimitRemaining, limit)
		}
	}
}
