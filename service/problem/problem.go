// Package problem writes the RFC 9457 problem details (problem+json) that
// every HTTP endpoint of sluice serve answers an error with: the status,
// a detail for people, and the request field at fault for programs.
package problem

import (
	"encoding/json"
	"net/http"
)

// body is a problem detail; Field names the offending request field when
// there is one.
type body struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
}

// Write answers code with a problem+json body of detail, naming field
// when it is not empty. The answer is never cached nor sniffed.
func Write(w http.ResponseWriter, code int, field, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	b, _ := json.Marshal(body{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail, Field: field})
	w.Write(append(b, '\n'))
}
