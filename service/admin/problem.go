package admin

import (
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/service/problem"
)

// writeProblem answers an error as problem+json, naming the field.
var writeProblem = problem.Write

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
