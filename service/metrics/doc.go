// Package metrics is what sluice serve observes of itself, and where it
// goes.
//
// What is observed comes in through three seams, each set once where
// serve wires its parts:
//
//   - engine.Observer: the engine reports the part each limit took in a
//     decision, and the descriptors that matched none;
//   - StoreObserver: Observe wraps the service's store, so that every store
//     call (of the engine, the HTTP API and the admin API alike) is timed,
//     and traced when tracing is on, in that one layer;
//   - failover.Observer: the breaker's transitions, the degraded decisions
//     and the shared store's errors.
//
// Metrics is the sink behind them: the service's Prometheus families on a
// registry of their own, served on /metrics, together with the summary of
// the keys denied most (service/topk) and the configuration in force
// (ConfigLoaded, Reloaded). Another sink (statsd, say) implements the same
// interfaces and goes next to it here. Labels are configured names, never
// request keys or values, but for the bounded detailed names of the rules
// that ask for them (MaxDetailedNames).
package metrics
