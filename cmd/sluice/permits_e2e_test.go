package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testserver/redistest"
)

// TestPermitsE2E runs sluice serve and many concurrent HTTP clients that
// acquire and release permits of one key with max 3 through /v1/acquire
// and /v1/release: never more than 3 hold at once (counted on the client
// side, from a 200 acquire to the release call), and all are released at
// the end. On memory, on Redis, and on Redis behind the local tier (which
// passes permits through).
func TestPermitsE2E(t *testing.T) {
	t.Run("memory", func(t *testing.T) { permitsE2E(t) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Server(t)
		permitsE2E(t, "--redis", srv.URL())
	})
	t.Run("redis-tiered", func(t *testing.T) {
		srv := redistest.Server(t)
		permitsE2E(t, "--redis", srv.URL(), "--tiered")
	})
}

func permitsE2E(t *testing.T, extra ...string) {
	p := start(t, nil, extra...)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	call := func(op, body string) (int, map[string]any, error) {
		resp, err := client.Post(p.http+"/v1/"+op, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%d %s: %v", resp.StatusCode, b, err)
		}
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			return resp.StatusCode, m, fmt.Errorf("429 without Retry-After: %s", b)
		}
		return resp.StatusCode, m, nil
	}
	const acquire = `{"key":"e2e-reports","max":3,"lease":"30s"}`
	if code, m, _ := call("acquire", acquire); code != 200 {
		t.Fatalf("first acquire = %d %v", code, m)
	} else if code, _, err := call("release", fmt.Sprintf(`{"key":"e2e-reports","holder":%q}`, m["holder"])); code != 200 || err != nil {
		t.Fatalf("first release = %d %v", code, err)
	}

	// Each client runs rounds rounds, and more (up to maxRounds) until
	// the run has seen the clients contend: a count, not a time, that a
	// busy machine cannot cut short.
	const clients, rounds, maxRounds = 24, 25, 250
	var (
		mu               sync.Mutex
		holding, peak    int
		acquired, denied int
		wg               sync.WaitGroup
		errs             = make(chan error, clients)
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			contended := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return peak >= 2 && denied > 0
			}
			for i := 0; i < maxRounds && (i < rounds || !contended()); i++ {
				code, m, err := call("acquire", acquire)
				if err != nil {
					errs <- err
					return
				}
				if code == 429 {
					mu.Lock()
					denied++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					continue
				}
				holder, _ := m["holder"].(string)
				if code != 200 || m["acquired"] != true || holder == "" {
					errs <- fmt.Errorf("acquire = %d %v", code, m)
					return
				}
				mu.Lock()
				holding++
				acquired++
				peak = max(peak, holding)
				mu.Unlock()
				time.Sleep(time.Duration(c%4) * 500 * time.Microsecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if code, _, err := call("release", fmt.Sprintf(`{"key":"e2e-reports","holder":%q}`, holder)); code != 200 || err != nil {
					errs <- fmt.Errorf("release = %d %v", code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d clients × %d rounds: %d acquired, %d denied, at most %d held at once", clients, rounds, acquired, denied, peak)
	if peak > 3 {
		t.Errorf("%d permits held at once, want at most 3", peak)
	}
	if peak < 2 || denied == 0 {
		t.Errorf("peak %d and %d denials: the clients did not contend", peak, denied)
	}
	// All released: 3 new holders acquire, the 4th is denied.
	for i := 1; i <= 4; i++ {
		code, m, err := call("acquire", fmt.Sprintf(`{"key":"e2e-reports","max":3,"lease":"30s","holder":"last-%d"}`, i))
		if want := map[bool]int{true: 200, false: 429}[i <= 3]; code != want || err != nil {
			t.Errorf("acquire %d after the run = %d %v (%v), want %d", i, code, m, err, want)
		}
		if i <= 3 && m["held"] != float64(i) {
			t.Errorf("acquire %d after the run holds %v, want %d: a permit was not released", i, m["held"], i)
		}
	}
}

// TestPermitsE2ERedisDownAtStart: while Redis has not been reached, an
// acquire is decided by the failure policy (fail closed: a 429), and once
// Redis is up permits are kept in Redis.
func TestPermitsE2ERedisDownAtStart(t *testing.T) {
	port := redistest.FreePort(t)
	p := start(t, nil, "--redis", "redis://127.0.0.1:"+strconv.Itoa(port), "--redis-timeout", "1s")
	p.waitLog(t, "redis unreachable at start")
	const body = `{"key":"late","max":1,"lease":"1m","holder":"h1"}`
	if code, resp := p.post(t, "/v1/acquire", body); code != 429 || !strings.Contains(resp, `"degraded":true`) {
		t.Errorf("acquire before Redis is up = %d %s, want a degraded 429 (fail closed)", code, resp)
	}
	r := redistest.ServerOnPort(t, port)
	p.waitLog(t, "redis connected")
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, resp := p.post(t, "/v1/acquire", body)
		if code == 200 && strings.Contains(resp, `"held":1`) && !strings.Contains(resp, "degraded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquire once Redis is up = %d %s, want 200 held 1", code, resp)
		}
		time.Sleep(20 * time.Millisecond) // the breaker closes on its next probe
	}
	if code, resp := p.post(t, "/v1/acquire", `{"key":"late","max":1,"lease":"1m","holder":"h2"}`); code != 429 {
		t.Errorf("a second holder once Redis is up = %d %s, want 429", code, resp)
	}
	if n, err := strconv.Atoi(r.MustDo("DBSIZE")); err != nil || n == 0 {
		t.Errorf("Redis DBSIZE = %v, %v: want the permit in Redis", n, err)
	}
}
