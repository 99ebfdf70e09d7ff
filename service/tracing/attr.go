package tracing

// Attribute keys of sluice's spans: a decision's on the caller's span (the
// protocol's server span), a store call's on its own child span.
const (
	AttrDomain      = "sluice.domain"
	AttrDescriptors = "sluice.descriptors"        // how many
	AttrHits        = "sluice.hits"               // the costs of the descriptors, added up
	AttrRules       = "sluice.rules"              // the names of the rules applied
	AttrResult      = "sluice.result"             // OK or OVER_LIMIT, as answered
	AttrDenied      = "sluice.denied"             // a limit denied (true in shadow mode too)
	AttrDegraded    = "sluice.degraded"           // a store decided without the shared store
	AttrKnown       = "sluice.domain_known"       // the domain and descriptors matched the configuration
	AttrValues      = "sluice.descriptor_entries" // with --tracing-keys only
	AttrKey         = "sluice.key"                // with --tracing-keys only
	AttrAlgorithm   = "sluice.algorithm"
	AttrN           = "sluice.n"
	AttrAllowed     = "sluice.allowed"
	AttrRequests    = "sluice.requests"
)
