package failover

import (
	"testing"
	"time"
)

func TestRTTTimeout(t *testing.T) {
	const ms = time.Millisecond
	var r rtt
	if got := r.timeout(10*ms, time.Second); got != time.Second {
		t.Errorf("timeout before any answer = %v, want the cap (1s)", got)
	}
	r.observe(80 * ms) // SRTT 80, RTTVAR 40: 80 + 160
	if got := r.timeout(10*ms, time.Second); got != 240*ms {
		t.Errorf("timeout after one 80ms answer = %v, want 240ms", got)
	}
	if got := r.timeout(300*ms, time.Second); got != 300*ms {
		t.Errorf("timeout under a 300ms floor = %v, want the floor", got)
	}
	if got := r.timeout(10*ms, 100*ms); got != 100*ms {
		t.Errorf("timeout under a 100ms cap = %v, want the cap", got)
	}
	for range 200 {
		r.observe(80 * ms)
	}
	// A steady round trip: RTTVAR decays to 0 and SRTT/2 is the margin.
	if got := r.timeout(10*ms, time.Second); got != 120*ms {
		t.Errorf("timeout after steady 80ms answers = %v, want 120ms", got)
	}
	r.observe(400 * ms) // SRTT 120, RTTVAR 80: 120 + 320
	if s, v, _ := r.get(); s != 120*ms || v != 80*ms {
		t.Errorf("after a 400ms answer SRTT, RTTVAR = %v, %v; want 120ms, 80ms", s, v)
	}
	if got := r.timeout(10*ms, time.Second); got != 440*ms {
		t.Errorf("timeout after a 400ms answer = %v, want 440ms", got)
	}
}
