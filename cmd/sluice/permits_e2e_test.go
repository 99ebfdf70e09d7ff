package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
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

	const clients, rounds = 24, 25
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
			for i := 0; i < rounds; i++ {
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
