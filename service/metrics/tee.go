package metrics

import "github.com/sluicehq/sluice/service/engine"

// Tee returns an engine.Observer that reports to each of obs in turn:
// sluice's metrics and another sink (envoyproxy/ratelimit's statistics,
// service/refstats) fed by the same decisions.
func Tee(obs ...engine.Observer) engine.Observer {
	if len(obs) == 1 {
		return obs[0]
	}
	return tee(obs)
}

type tee []engine.Observer

func (t tee) Decided(r engine.Report) {
	for _, o := range t {
		o.Decided(r)
	}
}

func (t tee) Unmatched(domain string) {
	for _, o := range t {
		o.Unmatched(domain)
	}
}

func (t tee) Requested(r engine.RequestReport) {
	for _, o := range t {
		o.Requested(r)
	}
}
