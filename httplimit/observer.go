package httplimit

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// Outcome is what the Middleware did with a request.
type Outcome uint8

const (
	// Allowed: every policy admitted the request; it was served.
	Allowed Outcome = iota + 1
	// Denied: a policy denied the request; it was answered 429.
	Denied
	// Skipped: a skip rule matched; no policy was consulted.
	Skipped
	// NoKey: a KeyFunc could not derive a key and no default key was set.
	NoKey
	// Failed: the store returned an error; the request was failed (503) or,
	// with WithFailOpen, served.
	Failed
)

var outcomeNames = [...]string{Allowed: "allowed", Denied: "denied", Skipped: "skipped", NoKey: "no_key", Failed: "failed"}

// String returns the outcome's metric label, such as "denied".
func (o Outcome) String() string {
	if o >= Allowed && o <= Failed {
		return outcomeNames[o]
	}
	return "unknown"
}

// PolicyDecision is one policy's decision for a request.
type PolicyDecision struct {
	Policy   string // Policy.Name
	Key      string // the key the policy's KeyFunc derived (not the store key)
	Decision sluice.Decision
}

// Event reports one request the Middleware handled, for metrics. Label
// metrics by Outcome and Policy (a configured name), never by Key.
type Event struct {
	Request *http.Request
	Outcome Outcome
	// Policy is the violated policy of a denial, "" otherwise.
	Policy string
	// Decisions holds one entry per policy that applied, for Allowed and
	// Denied.
	Decisions []PolicyDecision
	// Err is the key or store error of NoKey and Failed.
	Err error
	// Duration is the time spent deciding (zero for Skipped).
	Duration time.Duration
}

// Observer receives an Event for every request the Middleware handles. It
// is called synchronously on the request's goroutine: keep it cheap.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

type nopObserver struct{}

func (nopObserver) Observe(Event) {}
