package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/check"
	"github.com/sluicehq/sluice/service/engine"
)

// Bounds of the admin API's requests; the descriptors' count and entries
// are bounded by the engine's Bounds too.
const (
	// MaxQueryLen is the longest query string of an admin request, in
	// bytes.
	MaxQueryLen = 8 << 10
	// MaxBodySize is the largest body of an admin request, in bytes.
	MaxBodySize = 64 << 10
	// storeTimeout bounds the store calls of one admin request.
	storeTimeout = 10 * time.Second
)

// api serves /admin/v1.
type api struct {
	eng    *engine.Engine
	store  sluice.Store
	config *ConfigState
	log    *slog.Logger
}

// selector is what an inspect or a reset is about: descriptors of a domain
// as Envoy sends them, or a /v1/check key and limit (key.Key is not empty
// then), whose state is the one /v1/check counts on.
type selector struct {
	domain string
	descs  [][]engine.Entry

	key check.Check
}

// selectorJSON is the JSON body of an inspect or a reset.
type selectorJSON struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"entries"`
	} `json:"descriptors"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Rate      int    `json:"rate"`
	Period    string `json:"period"`
	Burst     int    `json:"burst"`
}

// badRequest is a request error naming its field.
type badRequest struct{ field, msg string }

func (e *badRequest) Error() string { return e.field + ": " + e.msg }

// parseSelector reads a selector from a JSON body (Content-Type
// application/json) or from the query string.
func (a *api) parseSelector(w http.ResponseWriter, r *http.Request) (*selector, *badRequest) {
	if len(r.URL.RawQuery) > MaxQueryLen {
		return nil, &badRequest{"", fmt.Sprintf("query string of %d bytes, longer than %d", len(r.URL.RawQuery), MaxQueryLen)}
	}
	var sj selectorJSON
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		if r.URL.RawQuery != "" {
			return nil, &badRequest{"", "send the selector in the JSON body or in the query string, not both"}
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodySize))
		if err != nil {
			return nil, &badRequest{"", fmt.Sprintf("reading the body (at most %d bytes): %v", MaxBodySize, err)}
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sj); err != nil {
			return nil, &badRequest{"", "malformed JSON: " + err.Error()}
		}
		if !utf8.Valid(body) {
			return nil, &badRequest{"", "the body is not valid UTF-8"}
		}
	} else if bad := queryJSON(r.URL.RawQuery, &sj); bad != nil {
		return nil, bad
	}
	return a.selectorOf(&sj)
}

// queryJSON reads the query string's selector into sj.
func queryJSON(raw string, sj *selectorJSON) *badRequest {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return &badRequest{"", "malformed query string: " + err.Error()}
	}
	for name, vs := range q {
		if name != "descriptor" && len(vs) > 1 {
			return &badRequest{name, "given more than once"}
		}
		v := vs[0]
		switch name {
		case "domain":
			sj.Domain = v
		case "key":
			sj.Key = v
		case "algorithm":
			sj.Algorithm = v
		case "period":
			sj.Period = v
		case "rate", "burst":
			n, err := strconv.Atoi(v)
			if err != nil {
				return &badRequest{name, fmt.Sprintf("%q is not an integer", v)}
			}
			if name == "rate" {
				sj.Rate = n
			} else {
				sj.Burst = n
			}
		case "descriptor":
			for i, d := range vs {
				if d == "" {
					return &badRequest{"descriptor[" + strconv.Itoa(i) + "]", "empty (want key=value,key2=value2)"}
				}
				sj.Descriptors = append(sj.Descriptors, struct {
					Entries []struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					} `json:"entries"`
				}{})
				dd := &sj.Descriptors[len(sj.Descriptors)-1]
				for j, kv := range strings.Split(d, ",") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return &badRequest{"descriptor[" + strconv.Itoa(i) + "]", fmt.Sprintf("entry %d %q is not key=value (a value holding a comma goes in a JSON body)", j, kv)}
					}
					dd.Entries = append(dd.Entries, struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					}{k, v})
				}
			}
		default:
			return &badRequest{name, "unknown parameter (want domain and descriptor, or key, algorithm, rate, period and burst)"}
		}
	}
	return nil
}

// selectorOf checks sj against the bounds.
func (a *api) selectorOf(sj *selectorJSON) (*selector, *badRequest) {
	b := a.eng.Bounds()
	if sj.Key != "" || sj.Algorithm != "" || sj.Period != "" || sj.Rate != 0 || sj.Burst != 0 {
		if sj.Domain != "" || len(sj.Descriptors) > 0 {
			return nil, &badRequest{"key", "a selector is a domain and descriptors, or a key and its limit, not both"}
		}
		return keySelector(sj, b)
	}
	if sj.Domain == "" {
		return nil, &badRequest{"domain", "missing (or give a /v1/check key, algorithm, rate and period)"}
	}
	if len(sj.Descriptors) == 0 {
		return nil, &badRequest{"descriptor", "missing (want key=value,key2=value2)"}
	}
	if b.MaxDescriptors > 0 && len(sj.Descriptors) > b.MaxDescriptors {
		return nil, &badRequest{"descriptor", fmt.Sprintf("%d descriptors, more than --max-descriptors %d", len(sj.Descriptors), b.MaxDescriptors)}
	}
	s := &selector{domain: sj.Domain}
	for i, d := range sj.Descriptors {
		f := "descriptor[" + strconv.Itoa(i) + "]"
		if len(d.Entries) == 0 {
			return nil, &badRequest{f, "no entries"}
		}
		if b.MaxDescriptorEntries > 0 && len(d.Entries) > b.MaxDescriptorEntries {
			return nil, &badRequest{f, fmt.Sprintf("%d entries, more than --max-descriptor-entries %d", len(d.Entries), b.MaxDescriptorEntries)}
		}
		es := make([]engine.Entry, len(d.Entries))
		for j, e := range d.Entries {
			switch {
			case e.Key == "":
				return nil, &badRequest{f, fmt.Sprintf("entry %d has an empty key", j)}
			case len(e.Key)+len(e.Value) > sluice.MaxKeyLen:
				return nil, &badRequest{f, fmt.Sprintf("entry %d is longer than %d bytes", j, sluice.MaxKeyLen)}
			case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value):
				return nil, &badRequest{f, fmt.Sprintf("entry %d is not valid UTF-8", j)}
			}
			es[j] = engine.Entry{Key: e.Key, Value: e.Value}
		}
		s.descs = append(s.descs, es)
	}
	return s, nil
}

// keySelector checks a /v1/check key and limit as /v1/check does, with
// a cost of 0.
func keySelector(sj *selectorJSON, b engine.Bounds) (*selector, *badRequest) {
	zero := 0
	c, fe := check.Parse(check.Request{Key: sj.Key, Algorithm: sj.Algorithm, Rate: sj.Rate, Period: sj.Period, Burst: sj.Burst, Cost: &zero}, b)
	if fe != nil {
		return nil, &badRequest{fe.Field, fe.Msg}
	}
	return &selector{key: c}, nil
}

// stateJSON is a counter's state.
type stateJSON struct {
	Limit        int   `json:"limit"`
	Remaining    int   `json:"remaining"`
	Over         bool  `json:"over"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

func stateOf(lim sluice.Limit, d sluice.Decision, over bool) *stateJSON {
	return &stateJSON{Limit: lim.Capacity(), Remaining: d.Remaining, Over: over,
		ResetAfterMS: check.Millis(d.ResetAfter), RetryAfterMS: check.Millis(d.RetryAfter)}
}

type entryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// inspectedRule is one limit of an inspected descriptor.
type inspectedRule struct {
	Rule      ruleJSON   `json:"rule"`
	Counting  string     `json:"counting,omitempty"` // in effect
	QuotaMode bool       `json:"quota_mode,omitempty"`
	Key       string     `json:"key,omitempty"` // the counter's key in the store
	State     *stateJSON `json:"state,omitempty"`
}

type inspectedDescriptor struct {
	Entries     []entryJSON     `json:"entries"`
	KnownDomain bool            `json:"known_domain"`
	Metric      string          `json:"metric,omitempty"`
	Rules       []inspectedRule `json:"rules"`
}

type inspectJSON struct {
	Domain      string                `json:"domain,omitempty"`
	Descriptors []inspectedDescriptor `json:"descriptors,omitempty"`
	Key         string                `json:"key,omitempty"`
	Limit       *limitJSON            `json:"limit,omitempty"`
	State       *stateJSON            `json:"state,omitempty"`
}

type limitJSON struct {
	Algorithm string `json:"algorithm"`
	Rate      int    `json:"rate"`
	Period    string `json:"period"`
	Burst     int    `json:"burst,omitempty"`
}

// inspect is GET and POST /admin/v1/inspect.
func (a *api) inspect(w http.ResponseWriter, r *http.Request) {
	s, bad := a.parseSelector(w, r)
	if bad != nil {
		writeProblem(w, http.StatusBadRequest, bad.field, bad.msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	if k := s.key; k.Key != "" {
		d, over, err := a.eng.InspectKey(ctx, k.StoreKey(), k.Limit)
		if err != nil {
			a.storeProblem(w, ctx, err)
			return
		}
		writeJSON(w, inspectJSON{Key: k.Key, Limit: limitOf(k.Limit), State: stateOf(k.Limit, d, over)})
		return
	}
	out := inspectJSON{Domain: s.domain}
	for i, es := range s.descs {
		ins, err := a.eng.Inspect(ctx, s.domain, es)
		if err != nil {
			a.engineProblem(w, ctx, i, err)
			return
		}
		out.Descriptors = append(out.Descriptors, describe(es, ins))
	}
	writeJSON(w, out)
}

func limitOf(l sluice.Limit) *limitJSON {
	return &limitJSON{Algorithm: l.Algorithm.String(), Rate: l.Rate, Period: l.Period.String(), Burst: l.Burst}
}

func describe(es []engine.Entry, ins engine.Inspection) inspectedDescriptor {
	d := inspectedDescriptor{KnownDomain: ins.Known, Metric: ins.Metric, Rules: []inspectedRule{}}
	for _, e := range es {
		d.Entries = append(d.Entries, entryJSON{e.Key, e.Value})
	}
	for _, rs := range ins.Rules {
		ir := inspectedRule{Rule: ruleOf(rs.Rule), QuotaMode: rs.QuotaMode}
		if !rs.Rule.Unlimited {
			ir.Counting = rs.Limit.Counting.String()
			ir.State = stateOf(rs.Limit, rs.Decision, rs.Over)
		}
		if rs.HasCounter {
			ir.Key = rs.Key
		}
		d.Rules = append(d.Rules, ir)
	}
	return d
}

// resetJSON is the answer of a reset.
type resetJSON struct {
	By    string       `json:"by"`
	Reset []resetEntry `json:"reset"`
}

type resetEntry struct {
	Rule       string `json:"rule,omitempty"`
	Descriptor int    `json:"descriptor"`
	Key        string `json:"key"`
}

// reset is POST /admin/v1/reset.
func (a *api) reset(w http.ResponseWriter, r *http.Request) {
	s, bad := a.parseSelector(w, r)
	if bad != nil {
		writeProblem(w, http.StatusBadRequest, bad.field, bad.msg)
		return
	}
	who := Caller(r.Context())
	rs := sluice.Lift(a.store) // a store that cannot reset answers ErrResetUnsupported: 501
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	out := resetJSON{By: who, Reset: []resetEntry{}}
	if k := s.key; k.Key != "" {
		err := rs.Reset(ctx, k.StoreKey(), k.Limit)
		a.logReset(who, "key", k.Key, "limit", k.Limit.String(), err)
		if err != nil {
			a.storeProblem(w, ctx, err)
			return
		}
		out.Reset = append(out.Reset, resetEntry{Descriptor: -1, Key: k.Key})
		writeJSON(w, out)
		return
	}
	for i, es := range s.descs {
		ins, err := a.eng.Inspect(ctx, s.domain, es)
		if err != nil {
			a.logReset(who, "domain", s.domain, "descriptor", entriesString(es), err)
			a.engineProblem(w, ctx, i, err)
			return
		}
		for _, st := range ins.Rules {
			if !st.HasCounter {
				continue
			}
			err := rs.Reset(ctx, st.Key, st.CounterLimit)
			a.logReset(who, "domain", s.domain, "descriptor", entriesString(es), err, "rule", st.Rule.Name)
			if err != nil {
				a.storeProblem(w, ctx, err)
				return
			}
			out.Reset = append(out.Reset, resetEntry{Rule: st.Rule.Name, Descriptor: i, Key: st.Key})
		}
	}
	writeJSON(w, out)
}

func (a *api) logReset(who, k1, v1, k2, v2 string, err error, more ...any) {
	args := append([]any{"by", who, k1, v1, k2, v2}, more...)
	if err != nil {
		a.log.Warn("admin reset failed", append(args, "err", err)...)
		return
	}
	a.log.Info("admin reset", append(args, "result", "ok")...)
}

func entriesString(es []engine.Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key + "=" + e.Value)
	}
	return b.String()
}

// engineProblem answers an error of the engine for descriptor i.
func (a *api) engineProblem(w http.ResponseWriter, ctx context.Context, i int, err error) {
	var re *engine.RequestError
	if errors.As(err, &re) {
		f := re.Field
		if f == "" || strings.HasPrefix(f, "descriptor") {
			f = "descriptor[" + strconv.Itoa(i) + "]"
		}
		writeProblem(w, http.StatusBadRequest, f, re.Msg)
		return
	}
	a.storeProblem(w, ctx, err)
}

// storeProblem answers a store call that made no decision: 504 when the
// deadline passed, 503 otherwise.
func (a *api) storeProblem(w http.ResponseWriter, ctx context.Context, err error) {
	if errors.Is(err, sluice.ErrResetUnsupported) {
		writeProblem(w, http.StatusNotImplemented, "", err.Error())
		return
	}
	var re *engine.RequestError
	if errors.As(err, &re) || errors.Is(err, sluice.ErrInvalidKey) || errors.Is(err, sluice.ErrInvalidLimit) {
		writeProblem(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if ctx.Err() != nil {
		writeProblem(w, http.StatusGatewayTimeout, "", "store: "+ctx.Err().Error())
		return
	}
	a.log.Warn("admin: store failed", "err", err)
	writeProblem(w, http.StatusServiceUnavailable, "", "store: "+err.Error())
}
