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
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/check"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/tracing"
)

// fieldError is a request error naming its field ("" for the body as a
// whole).
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

// parseCheck decodes a /v1/check body and checks it against b (before the
// store is asked anything).
func parseCheck(body []byte, b engine.Bounds) (check.Check, *fieldError) {
	var req check.Request
	if fe := decodeObject(body, &req); fe != nil {
		return check.Check{}, fe
	}
	if fe := jsonKey(req.Key, body); fe != nil {
		return check.Check{}, fe
	}
	c, fe := check.Parse(req, b)
	if fe != nil {
		return check.Check{}, &fieldError{fe.Field, fe.Msg}
	}
	return c, nil
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
	}
	return jsonKey(key, body)
}

// jsonKey checks that key, the "key" of body, is the key sent: encoding/json
// reads bytes that are not UTF-8, and lone surrogate escapes, as U+FFFD, and
// distinct keys would then share one counter.
func jsonKey(key string, body []byte) *fieldError {
	if strings.ContainsRune(key, utf8.RuneError) && !validKey(body) {
		return &fieldError{"key", "not valid UTF-8 (invalid bytes or a lone surrogate escape)"}
	}
	return nil
}

// limitError is the fieldError of an invalid limit (check.LimitFieldError).
func limitError(err error) *fieldError {
	fe := check.LimitFieldError(err)
	return &fieldError{fe.Field, fe.Msg}
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
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	bounds := engine.DefaultBounds
	if s.eng != nil {
		bounds = s.eng.Bounds()
	}
	c, fe := parseCheck(body, bounds)
	if fe != nil {
		writeProblem(w, http.StatusBadRequest, fe.field, fe.Error())
		return
	}
	if s.tr != nil {
		s.annotateCheck(r.Context(), c)
	}
	d, err := s.store.AllowN(r.Context(), c.StoreKey(), c.Limit, c.N)
	if err != nil {
		s.log.Warn("check: store failed", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "", "store: "+err.Error())
		return
	}
	if s.tr != nil {
		annotateChecked(r.Context(), d)
	}
	if s.metrics != nil {
		s.metrics.Checked(c.Limit.Algorithm, d.Allowed)
	}
	b, _ := json.Marshal(check.ResponseOf(c.Limit, d))
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// annotateCheck puts what /v1/check asks on the endpoint's span.
func (s *Server) annotateCheck(ctx context.Context, c check.Check) {
	attrs := []attribute.KeyValue{attribute.String(tracing.AttrAlgorithm, c.Limit.Algorithm.String()), attribute.Int(tracing.AttrN, c.N)}
	if s.tr.Keys() {
		attrs = append(attrs, tracing.String(tracing.AttrKey, c.Key))
	}
	tracing.Annotate(ctx, attrs...)
}

// annotateChecked puts the store's answer to /v1/check on the endpoint's
// span.
func annotateChecked(ctx context.Context, d sluice.Decision) {
	res := "OK"
	if !d.Allowed {
		res = "OVER_LIMIT"
	}
	tracing.Annotate(ctx, attribute.Bool(tracing.AttrAllowed, d.Allowed), attribute.Bool(tracing.AttrDegraded, d.Degraded),
		attribute.String(tracing.AttrResult, res))
}
