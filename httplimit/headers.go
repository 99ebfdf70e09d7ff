package httplimit

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Header names the package reads and writes.
const (
	// HeaderLimit is the quota (Rate) of the most restrictive policy.
	HeaderLimit = "X-RateLimit-Limit"
	// HeaderRemaining is what that policy still admits now.
	HeaderRemaining = "X-RateLimit-Remaining"
	// HeaderReset is the number of seconds, rounded up, until that policy's
	// key is back to full.
	HeaderReset = "X-RateLimit-Reset"
	// HeaderRateLimitPolicy is the draft-ietf-httpapi-ratelimit-headers-11
	// quota policy field: one list member per policy, as in
	// `"per-second";q=10;w=1, "per-day";q=1000;w=86400`.
	HeaderRateLimitPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the draft-11 service limit field: one list member
	// per policy, as in `"per-second";r=9;t=1, "per-day";r=999;t=86400`.
	HeaderRateLimit = "RateLimit"
	// HeaderRetryAfter is set on every denial, in whole seconds rounded up.
	HeaderRetryAfter = "Retry-After"
	// HeaderXForwardedFor is the de-facto proxy chain header.
	HeaderXForwardedFor = "X-Forwarded-For"
	// HeaderForwarded is the RFC 7239 proxy chain header.
	HeaderForwarded = "Forwarded"
	// HeaderXRealIP is the single-address header some proxies set to the
	// client they saw (nginx's proxy_set_header X-Real-IP $remote_addr).
	HeaderXRealIP = "X-Real-Ip"
)

// ContentTypeProblem is the media type of the problem details (RFC 9457)
// bodies the Middleware writes.
const ContentTypeProblem = "application/problem+json"

// Headers selects the rate-limit headers a Middleware sets on every
// response it decides, allowed or denied. Retry-After is always set on a
// denial.
type Headers uint8

const (
	// XRateLimitHeaders selects X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, for the most restrictive policy of the request.
	XRateLimitHeaders Headers = 1 << iota
	// DraftHeaders selects RateLimit-Policy and RateLimit as structured
	// fields of draft-ietf-httpapi-ratelimit-headers-11, one list member per
	// policy.
	DraftHeaders

	// NoHeaders sets no rate-limit header (Retry-After still goes on 429).
	NoHeaders Headers = 0
	// AllHeaders selects both sets; it is the default.
	AllHeaders = XRateLimitHeaders | DraftHeaders
)

// ceilSeconds returns d in whole seconds, rounded up; never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendSFString appends s as an RFC 8941 sf-string. s must be printable
// ASCII (checked when policies are validated).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// appendSFBinary appends p as an RFC 8941 sf-binary: base64 between colons.
func appendSFBinary(b []byte, p []byte) []byte {
	b = append(b, ':')
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, ':')
}

// validName reports whether s can be a policy name: non-empty printable
// ASCII, so that it is a valid sf-string.
func validName(s string) error {
	if s == "" {
		return fmt.Errorf("name is empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("name %q has byte %#x at %d; want printable ASCII", s, s[i], i)
		}
	}
	return nil
}

// quotaSeconds is the draft-11 w parameter of lim: its Period in whole
// seconds, rounded up (at least 1).
func quotaSeconds(lim sluice.Limit) int64 { return max(ceilSeconds(lim.Period), 1) }

// policyMember appends one RateLimit-Policy list member.
func policyMember(b []byte, name string, lim sluice.Limit, pk []byte) []byte {
	b = appendSFString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(lim.Rate), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, quotaSeconds(lim), 10)
	if pk != nil {
		b = append(b, ";pk="...)
		b = appendSFBinary(b, pk)
	}
	return b
}

// limitMember appends one RateLimit list member.
func limitMember(b []byte, name string, d sluice.Decision, pk []byte) []byte {
	b = appendSFString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(d.Remaining, 0)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	if pk != nil {
		b = append(b, ";pk="...)
		b = appendSFBinary(b, pk)
	}
	return b
}

// joinMembers builds a list field from members appended by fn.
func joinMembers(n int, fn func(b []byte, i int) []byte) string {
	b := make([]byte, 0, 48*n)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fn(b, i)
	}
	return string(b)
}
