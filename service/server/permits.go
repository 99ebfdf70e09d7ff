package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/service/check"
	"github.com/sluicehq/sluice/service/engine"
)

// permitKeyPrefix puts the keys of /v1/acquire, /v1/release and
// /v1/extend in their own namespace, apart from /v1/check's
// (check.KeyPrefix) and the RLS descriptors' (which never start with '*').
const permitKeyPrefix = "*permit/"

// MaxPermitKeyLen is the longest key the permit endpoints accept, in bytes.
const MaxPermitKeyLen = sluice.MaxKeyLen - len(permitKeyPrefix)

// PermitRequest is the body of POST /v1/acquire, /v1/release and
// /v1/extend (release reads key and holder only).
type PermitRequest struct {
	Key   string `json:"key"`
	Max   int    `json:"max"`
	TTL   string `json:"ttl"`    // a Go duration: "30s", "5m"
	TTLMS *int64 `json:"ttl_ms"` // or the TTL in milliseconds
	// Lease and LeaseMS are the former names of ttl and ttl_ms, still
	// accepted. Deprecated: send ttl or ttl_ms.
	Lease   string `json:"lease"`
	LeaseMS *int64 `json:"lease_ms"`
	Holder  string `json:"holder"` // optional on acquire: generated when empty
}

// PermitResponse is the body of an answer of POST /v1/acquire (200 or
// 429) and of POST /v1/extend (200).
type PermitResponse struct {
	Acquired     bool   `json:"acquired"`
	Degraded     bool   `json:"degraded,omitempty"`
	Holder       string `json:"holder,omitempty"`
	Held         int    `json:"held"`
	Max          int    `json:"max"`
	TTLMS        int64  `json:"ttl_ms"`
	LeaseMS      int64  `json:"lease_ms"`                // ttl_ms's former name, the same value. Deprecated: read ttl_ms.
	ExpiresAt    string `json:"expires_at,omitempty"`    // RFC 3339, on the store's clock
	ExpiresInMS  int64  `json:"expires_in_ms,omitempty"` // the TTL, from the store's decision
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// expiresFormat is RFC 3339 in milliseconds, truncated: a holder that
// renews by it renews early, never late.
const expiresFormat = "2006-01-02T15:04:05.000Z07:00"

// ReleaseResponse is the body of a 200 answer of POST /v1/release.
type ReleaseResponse struct {
	Released bool `json:"released"`
}

// permitOp is one of the permit endpoints.
type permitOp string

const (
	opAcquire permitOp = "acquire"
	opRelease permitOp = "release"
	opExtend  permitOp = "extend"
)

// parsePermit decodes and validates a permit body against b, before the
// store is asked anything. A missing holder is generated on acquire.
func parsePermit(op permitOp, body []byte, b engine.Bounds) (key string, lim sluice.ConcurrencyLimit, holder string, bad *fieldError) {
	var req PermitRequest
	if fe := decodeObject(body, &req); fe != nil {
		if strings.HasPrefix(fe.msg, "unknown field") {
			fe.msg = "unknown field (want key, max, ttl or ttl_ms, holder)"
		}
		return "", lim, "", fe
	}
	if fe := checkKey(req.Key, MaxPermitKeyLen, body); fe != nil {
		return "", lim, "", fe
	}
	holder = req.Holder
	switch {
	case holder == "" && op == opAcquire:
		holder = sluice.NewHolder()
	case holder == "":
		return "", lim, "", &fieldError{"holder", "missing or empty (the holder that acquire answered)"}
	case len(holder) > sluice.MaxHolderLen:
		return "", lim, "", &fieldError{"holder", fmt.Sprintf("%d bytes, longer than %d", len(holder), sluice.MaxHolderLen)}
	case strings.ContainsRune(holder, utf8.RuneError):
		// encoding/json reads invalid bytes and lone surrogates as U+FFFD:
		// two holders would be one, and one could release the other's permit.
		return "", lim, "", &fieldError{"holder", "not valid UTF-8, or holds U+FFFD"}
	}
	key = permitKeyPrefix + req.Key
	if op == opRelease {
		if req.Max != 0 || req.TTL != "" || req.TTLMS != nil || req.Lease != "" || req.LeaseMS != nil {
			return "", lim, "", &fieldError{"", "release takes key and holder only"}
		}
		return key, lim, holder, nil
	}
	// The TTL, by its name or by its former one (lease, lease_ms).
	durName, dur, msName, msp := "ttl", req.TTL, "ttl_ms", req.TTLMS
	oldSet := req.Lease != "" || req.LeaseMS != nil
	switch {
	case req.Max == 0:
		return "", lim, "", &fieldError{"max", fmt.Sprintf("missing (permits held at once, 1 to %d)", sluice.MaxPermits)}
	case oldSet && (dur != "" || msp != nil):
		return "", lim, "", &fieldError{"ttl", "set ttl or ttl_ms, not the deprecated lease or lease_ms too"}
	case oldSet:
		durName, dur, msName, msp = "lease", req.Lease, "lease_ms", req.LeaseMS
	}
	switch {
	case dur != "" && msp != nil:
		return "", lim, "", &fieldError{durName, "set " + durName + " or " + msName + ", not both"}
	case dur == "" && msp == nil:
		return "", lim, "", &fieldError{"ttl", `missing (a duration such as "30s", or ttl_ms)`}
	}
	if msp != nil {
		ms := *msp
		if ms < 0 || ms > int64(sluice.MaxTTL/time.Millisecond) {
			return "", lim, "", &fieldError{msName, fmt.Sprintf("%d must be within [%d, %d]", ms, sluice.MinTTL.Milliseconds(), sluice.MaxTTL.Milliseconds())}
		}
		lim.TTL = time.Duration(ms) * time.Millisecond
	} else {
		d, err := time.ParseDuration(dur)
		if err != nil {
			return "", lim, "", &fieldError{durName, fmt.Sprintf("%q is not a duration such as \"30s\" or \"5m\"", dur)}
		}
		lim.TTL = d
	}
	lim.Max = req.Max
	// The server's bounds first: they name the flag an operator can change.
	if b.MaxPermits > 0 && lim.Max > b.MaxPermits {
		return "", lim, "", &fieldError{"max", fmt.Sprintf("max %d exceeds --max-permits %d", lim.Max, b.MaxPermits)}
	}
	if b.MaxPermitLease > 0 && lim.TTL > b.MaxPermitLease {
		field := durName
		if msp != nil {
			field = msName
		}
		return "", lim, "", &fieldError{field, fmt.Sprintf("ttl %v exceeds --max-permit-lease %v (extend the permit for longer work)", lim.TTL, b.MaxPermitLease)}
	}
	if err := lim.Validate(); err != nil {
		fe := limitError(err)
		if fe.field == "ttl" {
			fe.field = durName
			if msp != nil {
				fe.field = msName
			}
		}
		return "", lim, "", fe
	}
	return key, lim, holder, nil
}

// handleAcquire is POST /v1/acquire: 200 with the permit, or 429 with
// Retry-After when max permits are held.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	s.servePermit(w, r, opAcquire)
}

// handleRelease is POST /v1/release: 200 whether the permit was held or
// not (its slot is free either way).
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	s.servePermit(w, r, opRelease)
}

// handleExtend is POST /v1/extend: 200 with the renewed permit, or 409
// when the permit was lost (its TTL ended first).
func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) { s.servePermit(w, r, opExtend) }

func (s *Server) servePermit(w http.ResponseWriter, r *http.Request, op permitOp) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	bounds := engine.DefaultBounds
	if s.eng != nil {
		bounds = s.eng.Bounds()
	}
	key, lim, holder, fe := parsePermit(op, body, bounds)
	if fe != nil {
		writeProblem(w, http.StatusBadRequest, fe.field, fe.Error())
		return
	}
	sem := sluice.Lift(s.store) // a store without permits answers ErrSemaphoreUnsupported
	// What one client holds is counted, and bounded, before the store is
	// asked: the store's table of permits is everyone's.
	id := s.permits.id(key, holder)
	reserved := false
	if op == opAcquire && bounds.MaxPermitsPerClient > 0 {
		client := s.permitClient(r)
		ok, res, retry := s.permits.reserve(client, id, lim.TTL, bounds.MaxPermitsPerClient)
		if !ok {
			s.permitted(op, "client_full")
			if retry > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(max((check.Millis(retry)+999)/1000, 1), 10))
				writeProblem(w, http.StatusTooManyRequests, "", fmt.Sprintf("client %s holds %d permits (--max-permits-per-client): release one, or wait for a lease to end", client, bounds.MaxPermitsPerClient))
				return
			}
			writeProblem(w, http.StatusServiceUnavailable, "", fmt.Sprintf("the server counts %d permits held, its most: retry later", MaxPermitLedger))
			return
		}
		reserved = res
	}
	var d sluice.PermitDecision
	var err error
	switch op {
	case opAcquire:
		d, err = sem.Acquire(r.Context(), key, lim, holder)
		s.permits.settle(id, reserved, err == nil && d.Acquired)
	case opRelease:
		err = sem.Release(r.Context(), key, holder)
		if err == nil {
			s.permits.release(id)
		}
	case opExtend:
		d, err = sem.Extend(r.Context(), key, lim, holder)
		if err == nil && d.Acquired {
			s.permits.extend(id, lim.TTL)
		} else if errors.Is(err, sluice.ErrPermitLost) || err == nil {
			s.permits.release(id)
		}
	}
	if op == opExtend && (errors.Is(err, sluice.ErrPermitLost) || err == nil && !d.Acquired) {
		s.permitted(op, "lost")
		writeProblem(w, http.StatusConflict, "holder", fmt.Sprintf("permit lost: holder %q holds no permit of the key (its TTL ended, or it was released); stop the work, or acquire again", holder))
		return
	}
	if errors.Is(err, sluice.ErrSemaphoreUnsupported) {
		s.permitted(op, "unsupported")
		writeProblem(w, http.StatusNotImplemented, "", fmt.Sprintf("the store (%s) does not keep concurrency limits: %v", storeName(s.store), err))
		return
	}
	if err != nil {
		s.permitted(op, "error")
		if errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrInvalidKey) {
			writeProblem(w, http.StatusBadRequest, "", err.Error())
			return
		}
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the caller left
		}
		// A caller can make the store fail at will (a full table of
		// permits refuses every new key): a line a minute at most.
		warnEvery(&s.permitLogged, s.log, string(op)+": store failed", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "", "store: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if op == opRelease {
		s.permitted(op, "released")
		b, _ := json.Marshal(ReleaseResponse{Released: true})
		w.Write(append(b, '\n'))
		return
	}
	ttl := lim.TTL.Milliseconds()
	resp := PermitResponse{Acquired: d.Acquired, Degraded: d.Degraded, Held: d.Held, Max: lim.Max, TTLMS: ttl, LeaseMS: ttl}
	if d.Acquired {
		resp.Holder = holder
		resp.ExpiresAt = d.Expires.UTC().Truncate(time.Millisecond).Format(expiresFormat)
		resp.ExpiresInMS = ttl
		s.permitted(op, map[permitOp]string{opAcquire: "acquired", opExtend: "extended"}[op])
	} else {
		resp.RetryAfterMS = check.Millis(d.RetryAfter)
		w.Header().Set("Retry-After", strconv.FormatInt(max((resp.RetryAfterMS+999)/1000, 1), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		s.permitted(op, "denied")
	}
	b, _ := json.Marshal(resp)
	w.Write(append(b, '\n'))
}

// permitted counts a permit operation's result.
func (s *Server) permitted(op permitOp, result string) {
	if s.metrics != nil {
		s.metrics.Permit(string(op), result)
	}
}

// storeName names a store for an error: its String, or its type.
func storeName(st sluice.Store) string {
	if sr, ok := st.(fmt.Stringer); ok {
		return sr.String()
	}
	return fmt.Sprintf("%T", st)
}
