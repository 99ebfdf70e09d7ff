package server

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/rls"
)

// Auth configures GET /v1/auth, the endpoint for nginx auth_request and
// Traefik ForwardAuth: each Source whose header is present in the
// subrequest becomes one descriptor, {Key: value}, of a request in Domain.
type Auth struct {
	Domain  string
	Sources []Source
	// DenyStatus is the status of a denial: 429 when 0. nginx's
	// auth_request turns every status but 2xx, 401 and 403 into 500, so
	// nginx set-ups use 403 and map it back with error_page.
	DenyStatus int
}

// Source is one descriptor of an auth request: Key, valued by the first of
// Headers present.
type Source struct {
	Key     string
	Headers []string
}

// DefaultAuth matches the built-in example configuration: domain
// "example", remote_address from X-Forwarded-For (its last address, the one
// the proxy itself saw) or X-Real-Ip, path from X-Original-URI (nginx) or
// X-Forwarded-Uri (Traefik) without its query, api_key from X-Api-Key.
func DefaultAuth() Auth {
	return Auth{Domain: "example", Sources: []Source{
		{Key: "remote_address", Headers: []string{"X-Forwarded-For", "X-Real-Ip"}},
		{Key: "path", Headers: []string{"X-Original-URI", "X-Forwarded-Uri"}},
		{Key: "api_key", Headers: []string{"X-Api-Key"}},
	}}
}

// ParseAuthSources parses "key=Header1|Header2,key2=Header3", as the
// --auth-descriptors flag gives it.
func ParseAuthSources(s string) ([]Source, error) {
	var out []Source
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, hs, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" || strings.TrimSpace(hs) == "" {
			return nil, fmt.Errorf("auth descriptor %q: want key=Header or key=Header1|Header2", part)
		}
		src := Source{Key: strings.TrimSpace(k)}
		for _, h := range strings.Split(hs, "|") {
			if h = strings.TrimSpace(h); h != "" {
				src.Headers = append(src.Headers, http.CanonicalHeaderKey(h))
			}
		}
		out = append(out, src)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("auth descriptors %q: none given", s)
	}
	return out, nil
}

// value returns the descriptor value of src in h, "" when absent.
func (src Source) value(h http.Header) string {
	for _, name := range src.Headers {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		switch http.CanonicalHeaderKey(name) {
		case "X-Forwarded-For":
			// The last address is the one the proxy in front of us saw;
			// earlier ones are whatever the client claimed.
			if i := strings.LastIndexByte(v, ','); i >= 0 {
				v = strings.TrimSpace(v[i+1:])
			}
			if ip := net.ParseIP(v); ip == nil {
				continue
			}
		case "X-Original-Uri", "X-Forwarded-Uri":
			v, _, _ = strings.Cut(v, "?")
		}
		if v != "" {
			return v
		}
	}
	return ""
}

// handleAuth answers 200 when the request described by the configured
// headers is admitted, 429 with Retry-After when it is not; both carry the
// RateLimit-* headers of the descriptor closest to its limit.
func (s *Server) handleAuth(w http.ResponseWriter, r *http.Request) {
	req := &pb.RateLimitRequest{Domain: s.auth.Domain}
	for _, src := range s.auth.Sources {
		if v := src.value(r.Header); v != "" {
			req.Descriptors = append(req.Descriptors, &rlpb.RateLimitDescriptor{
				Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: src.Key, Value: v}},
			})
		}
	}
	if len(req.Descriptors) == 0 {
		w.WriteHeader(http.StatusOK) // nothing to limit on
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), req)
	if err != nil {
		s.log.Warn("auth: decision failed", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "", err.Error())
		return
	}
	h := w.Header()
	if st := rls.Closest(resp); st != nil {
		reset := rls.CeilSeconds(st.DurationUntilReset.AsDuration())
		h.Set(rls.HeaderLimit, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10))
		h.Set(rls.HeaderRemaining, strconv.FormatUint(uint64(st.LimitRemaining), 10))
		h.Set(rls.HeaderReset, strconv.FormatInt(reset, 10))
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			h.Set("Retry-After", strconv.FormatInt(max(reset, 1), 10))
		}
	}
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		code := s.auth.DenyStatus
		if code == 0 {
			code = http.StatusTooManyRequests
		}
		writeProblem(w, code, "", "rate limit exceeded")
		return
	}
	w.WriteHeader(http.StatusOK)
}
