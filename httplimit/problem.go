package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemTypeQuotaExceeded is the problem type that
// draft-ietf-httpapi-ratelimit-headers registers for a request denied by a
// quota policy; the Middleware uses it for every 429.
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is an RFC 9457 problem details object, with the extension
// members the Middleware adds to a denial.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Policy names the violated policy of a 429.
	Policy string `json:"policy,omitempty"`
	// RetryAfter repeats the Retry-After header of a 429, in seconds.
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// Write writes p as the response: Content-Type application/problem+json,
// X-Content-Type-Options nosniff, status p.Status, and the JSON body.
func (p Problem) Write(w http.ResponseWriter) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings and integers
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	w.Write(body) //nolint:errcheck // the client went away; nothing to do
}
