package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rls"
)

// TestCheckBounds: POST /v1/check admits a limit at each bound and answers
// 400 naming the field and the flag one past it.
func TestCheckBounds(t *testing.T) {
	cfg, err := config.Parse("example.yaml", config.DefaultExample())
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	b := engine.Bounds{MaxRate: 1000, MaxLogRate: 200, MaxBurst: 50, MaxPeriod: time.Hour, MaxHits: 40}
	s := New(rls.New(engine.New(st, cfg, engine.WithBounds(b))), st)
	tests := []struct {
		give       string
		wantCode   int
		wantField  string
		wantDetail string
	}{
		{`{"key":"a","algorithm":"gcra","rate":1000,"period":"1h","burst":50,"cost":40}`, 200, "", ""},
		{`{"key":"a","algorithm":"gcra","rate":1001,"period":"1h"}`, 400, "rate", "rate 1001 exceeds --max-rate 1000"},
		{`{"key":"a","algorithm":"gcra","rate":10,"period":"1h","burst":51}`, 400, "burst", "burst 51 exceeds --max-burst 50"},
		{`{"key":"a","algorithm":"gcra","rate":10,"period":"1h0m0.001s"}`, 400, "period", "period 1h0m0.001s exceeds --max-period 1h0m0s"},
		{`{"key":"a","algorithm":"fixed_window","rate":100,"period":"1h","cost":41}`, 400, "cost", "cost 41 exceeds --max-hits 40"},
		// A sliding log keeps an entry per admission, up to its rate: a
		// caller's is bounded apart.
		{`{"key":"a","algorithm":"sliding_log","rate":200,"period":"1h","cost":40}`, 200, "", ""},
		{`{"key":"a","algorithm":"sliding_log","rate":201,"period":"1h"}`, 400, "rate", "rate 201 exceeds --max-log-rate 200"},
		// The library's own bound, past the server's.
		{`{"key":"a","algorithm":"sliding_log","rate":200,"period":"100us"}`, 400, "period", "Period 100µs must be >= 1ms"},
		{`{"key":"a","algorithm":"sliding_log","rate":200,"period":"1ms","cost":40}`, 200, "", ""},
		// A request that once panicked a memory-store shard under its lock: refused before any store call.
		{`{"key":"x","algorithm":"sliding_log","rate":4503599627370495,"period":"1s","cost":4503599627370495}`, 400, "rate", "exceeds --max-rate 1000"},
	}
	for _, tt := range tests {
		w := do(t, s, "POST", "/v1/check", tt.give)
		if w.Code != tt.wantCode {
			t.Errorf("POST /v1/check %s = %d %s, want %d", tt.give, w.Code, w.Body, tt.wantCode)
			continue
		}
		if tt.wantCode == 200 {
			continue
		}
		var p problemBody
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Field != tt.wantField || !strings.Contains(p.Detail, tt.wantDetail) {
			t.Errorf("POST /v1/check %s = %s, want field %q and detail %q", tt.give, w.Body, tt.wantField, tt.wantDetail)
		}
	}
	if st.Len() != 3 {
		t.Errorf("the store holds %d states, want 3 (only the admitted requests)", st.Len())
	}
}

// TestCheckKeyUTF8: a /v1/check key that is not UTF-8, or holds a lone
// surrogate escape, is a 400 naming the key (encoding/json would read both
// as U+FFFD, and distinct keys would share a bucket); U+FFFD itself, sent
// as the character or escaped, is a key like any other.
func TestCheckKeyUTF8(t *testing.T) {
	s, _ := newTestServer(t)
	body := func(key string) string {
		return `{"key":"` + key + `","algorithm":"fixed_window","rate":1,"period":"1h"}`
	}
	for _, key := range []string{"a\xffb", "a\xfeb", `a\udc00b`, `a\ud800b`, `a\ud800\u0041`, `a\udc00\\ufffd`, "a\xed\xa0\x80b"} {
		w := do(t, s, "POST", "/v1/check", body(key))
		var p problemBody
		json.Unmarshal(w.Body.Bytes(), &p)
		if w.Code != 400 || p.Field != "key" || !strings.Contains(p.Detail, "UTF-8") {
			t.Errorf("POST /v1/check key %q = %d %s, want 400 naming the key", key, w.Code, w.Body)
		}
	}
	// One bucket for the character and its escape (the same key), which
	// admits one request of rate 1; a pair of surrogates is a character.
	for i, key := range []string{"a\uFFFDb", `a\ufffdb`, `a\uFFFDb`} {
		w := do(t, s, "POST", "/v1/check", body(key))
		if w.Code != 200 || strings.Contains(w.Body.String(), `"allowed":true`) != (i == 0) {
			t.Errorf("POST /v1/check key %q (request %d) = %d %s, want 200, allowed only the first time", key, i+1, w.Code, w.Body)
		}
	}
	if w := do(t, s, "POST", "/v1/check", body(`\ud83d\ude00`)); w.Code != 200 || !strings.Contains(w.Body.String(), `"allowed":true`) {
		t.Errorf("POST /v1/check with a surrogate pair = %d %s, want 200 allowed", w.Code, w.Body)
	}
}

// TestJSONUTF8: POST /json refuses strings that are not UTF-8 (protojson
// does), so RLS descriptor values never collide through U+FFFD either.
func TestJSONUTF8(t *testing.T) {
	s, _ := newTestServer(t)
	for _, v := range []string{"10.0.0.1\xff", `10.0.0.1\udc00`} {
		body := `{"domain":"example","descriptors":[{"entries":[{"key":"remote_address","value":"` + v + `"}]}]}`
		if w := do(t, s, "POST", "/json", body); w.Code != 400 {
			t.Errorf("POST /json with value %q = %d %s, want 400", v, w.Code, w.Body)
		}
	}
}

// TestJSONBounds: POST /json goes through the service's bounds.
func TestJSONBounds(t *testing.T) {
	s, _ := newTestServer(t)
	d := `{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}`
	many := strings.TrimSuffix(strings.Repeat(d+",", engine.DefaultBounds.MaxDescriptors+1), ",")
	w := do(t, s, "POST", "/json", `{"domain":"example","descriptors":[`+many+`]}`)
	if w.Code != 400 || !strings.Contains(w.Body.String(), "descriptors 17 exceeds --max-descriptors 16") {
		t.Errorf("POST /json of %d descriptors = %d %s, want 400 naming --max-descriptors", engine.DefaultBounds.MaxDescriptors+1, w.Code, w.Body)
	}
}
