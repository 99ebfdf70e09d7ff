package admin

import (
	"encoding/json"
	"net/http"
)

// problem is an RFC 9457 problem+json body; Field names the request field
// at fault.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Field  string `json:"field,omitempty"`
}

func writeProblem(w http.ResponseWriter, code int, field, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	b, _ := json.Marshal(problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail, Field: field})
	w.Write(append(b, '\n'))
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "", "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}
