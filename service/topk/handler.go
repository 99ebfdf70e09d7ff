package topk

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"

	"github.com/sluicehq/sluice/service/problem"
)

// Bounds of the query of GET /admin/top.
const (
	// DefaultN is the number of keys per rule answered when n is not given.
	DefaultN = 10
	// MaxN bounds the query's n.
	MaxN = 100
	// MaxQueryName bounds the query's domain and rule, in bytes.
	MaxQueryName = 1024
)

// Answer is the JSON of GET /admin/top: the report of one replica.
type Answer struct {
	// Replica names the process that answers: the summary is per replica,
	// not merged across replicas.
	Replica string `json:"replica"`
	Scope   string `json:"scope"` // always "replica"
	Report
}

// Handler answers GET /admin/top with t's report as JSON, labelled with
// replica (the host name when ""). Its query selects: domain and rule (at
// most 1024 bytes each; all when absent) and n, the keys per rule (1 to
// 100, default 10). An invalid query is answered 400 with a problem+json
// naming the field.
func Handler(t *Tracker, replica string) http.Handler {
	if replica == "" {
		replica = Replica()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		domain, rule := q.Get("domain"), q.Get("rule")
		for _, f := range [...]struct{ name, v string }{{"domain", domain}, {"rule", rule}} {
			if len(f.v) > MaxQueryName {
				badRequest(w, f.name, f.name+" is longer than 1024 bytes")
				return
			}
		}
		n := DefaultN
		if s := q.Get("n"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > MaxN {
				badRequest(w, "n", "n must be an integer between 1 and 100")
				return
			}
			n = v
		}
		a := Answer{Replica: replica, Scope: "replica", Report: t.Report(domain, rule, n)}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		b, _ := json.Marshal(a)
		w.Write(append(b, '\n'))
	})
}

// Replica is this process's name for reports: host:pid.
func Replica() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return h + ":" + strconv.Itoa(os.Getpid())
}

func badRequest(w http.ResponseWriter, field, detail string) {
	problem.Write(w, http.StatusBadRequest, field, detail)
}
