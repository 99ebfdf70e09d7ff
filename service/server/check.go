package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/tracing"
)

// checkKeyPrefix puts /v1/check keys in their own namespace: configured RLS
// keys never start with '*' (service/config escapes it), so no caller of
// /v1/check can spend an RLS descriptor's quota or the reverse.
const checkKeyPrefix = "*check/"

// MaxCheckKeyLen is the longest key POST /v1/check accepts, in bytes.
const MaxCheckKeyLen = sluice.MaxKeyLen - len(checkKeyPrefix)

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Rate      int    `json:"rate"`
	Period    string `json:"period"` // a Go duration: "1s", "30s", "1h30m"
	Burst     int    `json:"burst"`
	Cost      *int   `json:"cost"` // default 1; 0 asks without spending
}

// CheckResponse is the body of a 200 answer of POST /v1/check.
type CheckResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int   `json:"limit"`
	Remaining    int   `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// fieldError is a request error naming its field ("" for the body as a
// whole).
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

// parseCheck decodes and validates a /v1/check body against b (checked
// before the store is asked anything).
func parseCheck(body []byte, b engine.Bounds) (key string, lim sluice.Limit, n int, bad *fieldError) {
	var req CheckRequest
	if fe := decodeObject(body, &req); fe != nil {
		return "", lim, 0, fe
	}
	if fe := checkKey(req.Key, MaxCheckKeyLen, body); fe != nil {
		return "", lim, 0, fe
	}
	switch {
	case req.Algorithm == "":
		return "", lim, 0, &fieldError{"algorithm", "missing (want fixed_window, sliding_log, sliding_window, token_bucket or gcra)"}
	case req.Period == "":
		return "", lim, 0, &fieldError{"period", `missing (a duration such as "1s" or "30s")`}
	}
	a, err := sluice.ParseAlgorithm(req.Algorithm)
	if err != nil {
		return "", lim, 0, limitError(err)
	}
	p, err := time.ParseDuration(req.Period)
	if err != nil {
		return "", lim, 0, &fieldError{"period", fmt.Sprintf("%q is not a duration such as \"1s\" or \"30s\"", req.Period)}
	}
	lim = sluice.Limit{Algorithm: a, Rate: req.Rate, Period: p, Burst: req.Burst}
	n = 1
	if req.Cost != nil {
		n = *req.Cost
	}
	// The server's bounds first: they name the flag an operator can change.
	var be *engine.BoundError
	if err := b.CheckLimit(lim, n); errors.As(err, &be) {
		return "", lim, 0, &fieldError{be.Field, err.Error()}
	}
	if err := lim.Validate(); err != nil {
		return "", lim, 0, limitError(err)
	}
	if n < 0 {
		return "", lim, 0, &fieldError{"cost", fmt.Sprintf("%d must be >= 0", n)}
	}
	if c := lim.Capacity(); n > c {
		return "", lim, 0, &fieldError{"cost", fmt.Sprintf("%d exceeds the limit's capacity %d: it could never be admitted", n, c)}
	}
	return checkKeyPrefix + req.Key, lim, n, nil
}

// decodeObject decodes body, one JSON object of known fields only, into v.
func decodeObject(body []byte, v any) *fieldError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &fieldError{"", "malformed JSON: data after the object"}
	}
	return nil
}

// checkKey checks the "key" of body, decoded as key: 1 to maxLen bytes of
// UTF-8.
func checkKey(key string, maxLen int, body []byte) *fieldError {
	switch {
	case key == "":
		return &fieldError{"key", "missing or empty"}
	case len(key) > maxLen:
		return &fieldError{"key", fmt.Sprintf("%d bytes, longer than %d", len(key), maxLen)}
	case strings.ContainsRune(key, utf8.RuneError) && !validKey(body):
		// encoding/json reads bytes that are not UTF-8, and lone surrogate
		// escapes, as U+FFFD: distinct keys would share one bucket.
		return &fieldError{"key", "not valid UTF-8 (invalid bytes or a lone surrogate escape)"}
	}
	return nil
}

// limitError is the fieldError of an invalid limit: the request field is
// the limit's field in lower case (rate, period, burst, algorithm), and the
// message the error's reason.
func limitError(err error) *fieldError {
	var le *sluice.LimitError
	if errors.As(err, &le) {
		return &fieldError{strings.ToLower(le.Field), le.Reason}
	}
	return &fieldError{"", err.Error()}
}

// validKey reports whether the raw "key" of a /v1/check body is UTF-8 and
// holds no lone surrogate escape (\ud800 to \udfff not in a pair), the two
// things that encoding/json reads as U+FFFD.
func validKey(body []byte) bool {
	var raw struct {
		Key json.RawMessage `json:"key"`
	}
	if json.Unmarshal(body, &raw) != nil || !utf8.Valid(raw.Key) {
		return false
	}
	k := raw.Key
	hex4 := func(i int) (rune, bool) { // the code of \uXXXX at k[i:]
		if i+6 > len(k) || k[i] != '\\' || k[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(k[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(k); i++ {
		if k[i] != '\\' {
			continue
		}
		if i+1 < len(k) && k[i+1] != 'u' {
			i++ // a one-character escape, such as \\ or \"
			continue
		}
		r, ok := hex4(i)
		if !ok {
			return false
		}
		switch {
		case 0xd800 <= r && r < 0xdc00: // a high surrogate: a low one must follow
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 11
		case 0xdc00 <= r && r <= 0xdfff:
			return false
		default:
			i += 5
		}
	}
	return true
}

// jsonError describes a decoding error, naming the field when it can.
func jsonError(err error) *fieldError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return &fieldError{te.Field, fmt.Sprintf("must be a JSON %s, not %s", te.Type.Kind(), te.Value)}
	case errors.As(err, &se):
		return &fieldError{"", fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)}
	case errors.Is(err, io.EOF):
		return &fieldError{"", "malformed JSON: empty body"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &fieldError{"", "malformed JSON: truncated"}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &fieldError{strings.Trim(f, `"`), "unknown field (want key, algorithm, rate, period, burst, cost)"}
	}
	return &fieldError{"", "malformed JSON: " + err.Error()}
}

// handleCheck is POST /v1/check: the limit travels in the request; the
// answer is 200 with the decision, allowed or not.
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		s.bodyError(w, err)
		return
	}
	bounds := engine.DefaultBounds
	if s.eng != nil {
		bounds = s.eng.Bounds()
	}
	key, lim, n, fe := parseCheck(body, bounds)
	if fe != nil {
		writeProblem(w, http.StatusBadRequest, fe.field, fe.Error())
		return
	}
	start := time.Now()
	var d sluice.Decision
	if s.tr != nil {
		d, err = s.allowTraced(r.Context(), key, lim, n)
	} else {
		d, err = s.store.AllowN(r.Context(), key, lim, n)
	}
	if s.metrics != nil {
		s.metrics.StoreCall(time.Since(start), err)
	}
	if err != nil {
		s.log.Warn("check: store failed", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "", "store: "+err.Error())
		return
	}
	if s.metrics != nil {
		s.metrics.checked(lim.Algorithm, d.Allowed)
	}
	b, _ := json.Marshal(CheckResponse{
		Allowed:      d.Allowed,
		Limit:        lim.Capacity(),
		Remaining:    d.Remaining,
		RetryAfterMS: ceilMS(d.RetryAfter),
		ResetAfterMS: ceilMS(d.ResetAfter),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// allowTraced is /v1/check's store call in a child span, its attributes
// also on the endpoint's span.
func (s *Server) allowTraced(ctx context.Context, key string, lim sluice.Limit, n int) (sluice.Decision, error) {
	attrs := []attribute.KeyValue{attribute.String(engine.AttrAlgorithm, lim.Algorithm.String()), attribute.Int(engine.AttrN, n)}
	if s.tr.Keys() {
		attrs = append(attrs, tracing.String(engine.AttrKey, strings.TrimPrefix(key, checkKeyPrefix)))
	}
	tracing.Annotate(ctx, attrs...)
	sctx, span := s.tr.Start(ctx, "store.AllowN", attrs...)
	d, err := s.store.AllowN(sctx, key, lim, n)
	if err == nil {
		res := attribute.String(engine.AttrResult, "OK")
		if !d.Allowed {
			res = attribute.String(engine.AttrResult, "OVER_LIMIT")
		}
		out := []attribute.KeyValue{attribute.Bool(engine.AttrAllowed, d.Allowed), attribute.Bool(engine.AttrDegraded, d.Degraded)}
		span.SetAttributes(out...)
		tracing.Annotate(ctx, append(out, res)...)
	}
	tracing.End(span, err)
	return d, err
}
