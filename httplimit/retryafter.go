package httplimit

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxRetryAfterSeconds caps what parseRetryAfter returns for an absurd
// delay-seconds, so that the Duration cannot overflow. Callers clamp far
// lower (Transport.MaxBackoff).
const maxRetryAfterSeconds = 1 << 31

// parseRetryAfter parses a Retry-After value (RFC 9110 section 10.2.3):
// delay-seconds (one or more digits) or an HTTP-date, which is taken
// relative to now (a date in the past gives 0). Surrounding whitespace is
// ignored. A negative, fractional or otherwise malformed value is an error
// naming it; a huge delay-seconds or a far date is capped at 2^31 seconds
// rather than overflowing. The result is never negative; callers clamp it
// to their own maximum.
func parseRetryAfter(v string, now time.Time) (time.Duration, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, fmt.Errorf("httplimit: Retry-After %q is empty", v)
	}
	if s[0] >= '0' && s[0] <= '9' { // an HTTP-date starts with a day name
		var n int64
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("httplimit: Retry-After %q is not delay-seconds", v)
			}
			n = min(n*10+int64(c-'0'), maxRetryAfterSeconds)
		}
		return time.Duration(n) * time.Second, nil
	}
	t, err := http.ParseTime(s)
	if err != nil {
		return 0, fmt.Errorf("httplimit: Retry-After %q is neither delay-seconds nor an HTTP-date", v)
	}
	if d := t.Sub(now); d > 0 {
		return min(d, maxRetryAfterSeconds*time.Second), nil
	}
	return 0, nil
}
